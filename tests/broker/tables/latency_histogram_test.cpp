// Unit tests for latency_histogram: bucket placement at the bounds, the
// count and sum, and the quantile bounds.

#include "broker/tables/latency_histogram.hpp"

#include <catch2/catch.hpp>

using switchyard::broker::latency_histogram;
using namespace std::chrono_literals;

TEST_CASE("a value lands in the first bucket whose bound it does not exceed", "[broker][histogram]") {
  latency_histogram h;
  h.observe(10us);      // == the first bound: bucket 0
  h.observe(10'001ns);  // just past it: bucket 1 (<= 25us)
  h.observe(1ms);       // == 1000us: bucket 6
  h.observe(11s);       // past 10 s: +Inf
  CHECK(h.bucket(0) == 1);
  CHECK(h.bucket(1) == 1);
  CHECK(h.bucket(6) == 1);
  CHECK(h.bucket(latency_histogram::bounds_us.size()) == 1);
  CHECK(h.count() == 4);
  CHECK(h.sum_ns() == 10'000 + 10'001 + 1'000'000 + 11'000'000'000ull);
}

TEST_CASE("a negative duration counts as zero", "[broker][histogram]") {
  latency_histogram h;
  h.observe(-5ms);
  CHECK(h.bucket(0) == 1);
  CHECK(h.sum_ns() == 0);
}

TEST_CASE("quantile bounds are the smallest bucket bound holding that share of the values", "[broker][histogram]") {
  latency_histogram h;
  CHECK(h.quantile_bound_us(0.5) == 0);          // empty
  for (int i = 0; i < 98; ++i) h.observe(40us);  // <= 50us
  h.observe(3ms);                                // <= 5000us
  h.observe(20s);                                // +Inf
  CHECK(h.quantile_bound_us(0.5) == 50);
  CHECK(h.quantile_bound_us(0.98) == 50);
  CHECK(h.quantile_bound_us(0.99) == 5000);
  CHECK(h.quantile_bound_us(1.0) == UINT64_MAX);
}
