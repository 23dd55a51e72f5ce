#include "storage/log_codec.hpp"

#include "storage/raw_access.hpp"

#include <limits>

namespace switchyard::storage {

namespace log_codec {

void stream_meta::encode(std::byte* p) const {
  const std::uint64_t f[7] = {id, epoch, first, last, records, bytes, created};
  for (int i = 0; i < 7; ++i) put_le<std::uint64_t>(p + 8 * i, f[i]);
}

std::expected<stream_meta, std::error_code> stream_meta::decode(const MDB_val& v) {
  if (v.mv_size != meta_size) return std::unexpected(make_error_code(errc::corrupted));
  const auto* p = static_cast<const std::byte*>(v.mv_data);
  stream_meta m;
  std::uint64_t* f[7] = {&m.id, &m.epoch, &m.first, &m.last, &m.records, &m.bytes, &m.created};
  for (int i = 0; i < 7; ++i) *f[i] = get_le<std::uint64_t>(p + 8 * i);
  return m;
}

stream_info stream_meta::info(std::string_view name) const {
  return {std::string(name), id, epoch, first, last, records, bytes, created};
}

void encode_retention(const retention& limits, std::byte* p) {
  put_le<std::uint64_t>(p, limits.max_records);
  put_le<std::uint64_t>(p + 8, static_cast<std::uint64_t>(limits.max_age.count()));
  put_le<std::uint64_t>(p + 16, limits.max_bytes);
}

std::expected<retention, std::error_code> decode_retention(const MDB_val& v) {
  if (v.mv_size < retention_size) return std::unexpected(make_error_code(errc::corrupted));
  const auto* p = static_cast<const std::byte*>(v.mv_data);
  const std::uint64_t age = get_le<std::uint64_t>(p + 8);
  if (age > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    return std::unexpected(make_error_code(errc::corrupted));
  return retention{get_le<std::uint64_t>(p), std::chrono::milliseconds(static_cast<std::int64_t>(age)),
                   get_le<std::uint64_t>(p + 16)};
}

}  // namespace log_codec

// storage/raw_access.hpp
std::uint64_t record_checksum(std::uint64_t seq, std::span<const std::byte> value) {
  if (value.size() < log_codec::record_header) return 0;
  return log_codec::checksum(seq, log_codec::record_timestamp(value.data()), value.data(), value.size());
}

}  // namespace switchyard::storage
