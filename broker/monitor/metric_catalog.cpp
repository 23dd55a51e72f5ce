#include "broker/monitor/metric_catalog.hpp"

namespace switchyard::broker {

std::vector<metric> metrics_of(const metrics_snapshot& m) {
  const auto& n = m.counters;
  const auto& log = m.group_commit;
  const auto counter = [](std::string_view name, std::string_view help, std::uint64_t v) {
    return metric{name, help, v, true};
  };
  const auto gauge = [](std::string_view name, std::string_view help, std::uint64_t v) {
    return metric{name, help, v, false};
  };
  return {
      counter("connections_accepted_total", "Connections accepted (past admission control at accept).",
              n.connections_accepted),
      counter("connections_rejected_total", "Connections refused with too_many_connections.", n.connections_rejected),
      counter("hellos_rate_limited_total", "Hellos refused with rate_limited (--max-hellos-per-s).",
              n.hellos_rate_limited),
      counter("hellos_draining_total", "Hellos refused with draining during a drain.", n.hellos_draining),
      counter("connections_drained_total", "Open connections a drain closed.", n.connections_drained),
      counter("protocol_errors_total", "Connections closed for bad input (malformed frames and the like).",
              n.protocol_errors),
      counter("auth_failures_total", "Hellos refused with unauthorized.", n.auth_failures),
      counter("auth_rate_limited_total", "Hellos refused for too many failed attempts from the address.",
              n.auth_rate_limited),
      counter("forbidden_total", "Requests refused by a permission list.", n.forbidden),
      counter("published_total", "Publishes routed.", n.published),
      counter("delivered_total", "Deliveries queued, one per subscribed connection per publish.", n.delivered),
      counter("dropped_total", "Deliveries dropped for slow consumers.", n.dropped),
      counter("slow_consumers_total", "Times a connection began dropping deliveries.", n.slow_consumers),
      counter("sends_routed_total", "Route keys of sends delivered into an inbox.", n.sends_routed),
      counter("sends_unrouted_total", "Route keys of sends with no route.", n.sends_unrouted),
      counter("leases_expired_total", "Leases the sweeper expired.", n.leases_expired),
      counter("received_bytes_total", "Bytes read from clients (after TLS).", n.bytes_in),
      counter("sent_bytes_total", "Bytes written to clients (before TLS).", n.bytes_out),
      counter("write_waits_total", "Turns a small write waited for more input to coalesce.", n.write_waits),
      counter("writes_total", "Socket writes of queued frames (one gather write each).", n.writes),
      counter("frames_written_total", "Frames those writes carried (frames per write: the ratio of the two).",
              n.frames_written),
      counter("expired_total", "Deliveries dropped unwritten because their expiry passed while queued.", n.expired),
      counter("expired_read_total", "Log records left out of reads because their expiry had passed.", n.expired_read),
      counter("withdrawn_unwritten_total", "Deliveries dropped unwritten because their offer was withdrawn.",
              n.withdrawn_queued),
      counter("offers_total", "Sends with an offer id taken.", n.offers),
      counter("offers_capped_total", "Route keys offers skipped for being over their exposure cap.", n.offers_capped),
      counter("offers_withdrawn_total", "Offers withdrawn.", n.offers_withdrawn),
      counter("offers_expired_total", "Offers that reached their expiry while live.", n.offers_expired),
      counter("offers_evicted_total", "Live offers forgotten to stay within max-offers / max-offer-bytes.",
              m.offers_evicted),
      counter("offers_pending_pushed_out_total", "Pending entries pushed out by max-pending-per-key.",
              m.pending_pushed_out),
      counter("receipts_acked_total", "Offer keys acknowledged by their gateway.", n.receipts_acked),
      counter("receipt_timeouts_total", "Offer keys whose receipt timeout passed unacknowledged.", n.receipt_timeouts),
      counter("receipts_undeliverable_total", "Receipts with no sender connection or receipt inbox to take them.",
              n.receipts_undeliverable),
      counter("exposure_untracked_total", "Offers not counted for exposure caps: max-exposure-keys reached.",
              n.exposure_untracked),
      counter("log_appends_total", "Records appended to the sequence log.", log.records),
      counter("log_commit_batches_total", "Group commits (batches of appends) written.", log.batches),
      counter("log_syncs_total", "Explicit syncs of the sequence log.", log.syncs),
      counter("log_fsyncs_total",
              "Flushes of the sequence log to disk: each commit's own in the sync mode, plus the explicit syncs.",
              log.fsyncs),
      counter("log_trimmed_total", "Records removed by retention.", log.trimmed),
      counter("log_full_total", "Appends refused with storage_full.", log.full_attempts),
      gauge("connections", "Open connections, including those being refused.", m.connections),
      gauge("connections_refusing", "Connections over the cap saying goodbye.", m.connections_rejecting),
      gauge("subscriptions", "Subscriptions (pattern and connection pairs).", m.subscriptions),
      gauge("leases", "Live leases, private TTL leases included.", m.leases),
      gauge("registry_entries", "Routing registry entries.", m.registry_entries),
      gauge("inboxes", "Open inboxes.", m.inboxes),
      gauge("streams", "Streams in the sequence log (0 without one).", m.streams),
      gauge("queued_bytes", "Bytes in all outbound queues.", m.queued_bytes),
      gauge("queued_bytes_max", "Bytes in the fullest outbound queue.", m.queued_bytes_max),
      gauge("incomplete_frame_bytes", "Bytes held by incomplete frames.", m.incomplete_bytes),
      gauge("incomplete_frame_bytes_peak", "The most bytes incomplete frames held at once.", m.incomplete_bytes_peak),
      gauge("arena_chunks", "Frame arena chunks allocated (in use or pooled).", m.arena_chunks),
      gauge("log_appends_waiting", "Appends queued for the group committer, not yet answered.", m.appends_waiting),
      gauge("log_largest_batch", "The largest group commit so far, in records.", log.largest_batch),
      gauge("offers", "Live offers (not expired, withdrawn or forgotten).", m.offers),
      gauge("offer_bytes", "Bytes live offers hold (payloads, keys, bookkeeping).", m.offer_bytes),
      gauge("offers_pending", "Pending (route key, offer) entries.", m.offers_pending),
      gauge("exposure_keys", "Route keys with offers counted in the exposure window.", m.exposure_keys),
      gauge("exposure_bytes", "Bytes the exposure counts hold.", m.exposure_bytes),
      gauge("flag_offers_percent", "The flag offers: its share of connections, 0..100.", m.flag_offers_percent),
      gauge("flag_offers_connections_on", "Connections that declared \"offers\", inside the flag's ramp.",
            m.flag_offers_on),
      gauge("flag_offers_connections_off", "Connections that declared \"offers\", outside the flag's ramp.",
            m.flag_offers_off),
      gauge("ready", "1 while the server accepts new clients (not draining or stopping).", m.ready ? 1 : 0),
      gauge("draining", "1 during a drain.", m.draining ? 1 : 0),
  };
}

std::vector<histogram_metric> histograms_of(const metrics_snapshot& m) {
  return {
      {"delivery_latency_seconds",
       "Time a connection's oldest queued frame waited for the write carrying it to start (one observation per "
       "write; a frame queued behind a write in progress counts from that write's start).",
       &m.counters.delivery_latency},
      {"log_append_latency_seconds",
       "Time from an append being queued to its result reaching the loop (durable, or refused).", &m.append_latency},
  };
}

}  // namespace switchyard::broker
