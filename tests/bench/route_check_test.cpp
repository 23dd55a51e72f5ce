// The route workload's checker (bench/route_check.hpp) on its own: the
// deliveries are made by hand, among them a deliberately misrouted and a
// reordered one, so a misroute the broker never makes is still caught.

#include "bench/route_check.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <deque>
#include <set>
#include <string>
#include <vector>

using switchyard::bench::put_route_header;
using switchyard::bench::route_checker;
using switchyard::bench::route_sentinel;
using switchyard::bench::route_tally;
using switchyard::bench::user_picker;

namespace {

struct delivery {
  std::vector<std::byte> payload = std::vector<std::byte>(32, std::byte{'x'});
  std::string key;
  std::array<std::string_view, 1> keys{};

  delivery(std::uint64_t seq, std::uint64_t user, std::string route_key) : key(std::move(route_key)) {
    put_route_header(payload, seq, user);
  }
  void to(route_checker& c, std::uint64_t now = 1) {
    keys[0] = key;
    c.on_delivery(payload, keys, now);
  }
};

}  // namespace

TEST_CASE("a gateway's checker counts messages for its own users in order as clean", "[bench]") {
  route_checker gw1(1, 3, 9);
  delivery(0, 1, "user:1").to(gw1, 10);
  delivery(5, 4, "user:4").to(gw1, 20);
  delivery(9, 7, "user:7").to(gw1, 30);
  CHECK(gw1.received() == 3);
  CHECK(gw1.last_ns() == 30);
  CHECK(gw1.misrouted() == 0);
  CHECK(gw1.reorder() == 0);
  CHECK_FALSE(gw1.ended());
  delivery(route_sentinel, 1, "user:1").to(gw1, 40);
  CHECK(gw1.ended());
  CHECK(gw1.received() == 3);  // the sentinel is not a message
  CHECK(gw1.last_ns() == 30);
  CHECK(gw1.misrouted() == 0);
}

TEST_CASE("checked per user, sends to different users may interleave but one user's may not go back", "[bench]") {
  route_checker per_inbox(1, 3, 9), per_user(1, 3, 9, {}, true);
  for (auto* gw : {&per_inbox, &per_user}) {
    delivery(5, 4, "user:4").to(*gw);
    delivery(3, 1, "user:1").to(*gw);  // another user, sent earlier, arrives later: another path
    delivery(7, 4, "user:4").to(*gw);
  }
  CHECK(per_inbox.reorder() == 1);
  CHECK(per_user.reorder() == 0);
  delivery(6, 4, "user:4").to(per_user);  // user 4 went back from 7 to 6
  CHECK(per_user.reorder() == 1);
  CHECK(per_user.misrouted() == 0);
}

TEST_CASE("a message for another gateway's user is counted as misrouted and fails the run", "[bench]") {
  route_checker gw0(0, 3, 9), gw1(1, 3, 9), gw2(2, 3, 9);
  delivery(0, 0, "user:0").to(gw0);
  delivery(1, 2, "user:2").to(gw0);  // user 2 lives on gateway 2: deliberately misrouted
  delivery(2, 1, "user:1").to(gw1);
  for (auto* gw : {&gw0, &gw1, &gw2})
    delivery(route_sentinel, 0, "").to(*gw);  // sentinels for user 0 without its key: misrouted everywhere
  CHECK(gw0.misrouted() == 2);                // the message, and the sentinel's missing key
  CHECK(gw1.misrouted() == 1);
  CHECK(gw2.misrouted() == 1);
  CHECK(gw0.received() == 2);  // counted as received: it arrived, at the wrong place
  const route_checker* all[] = {&gw0, &gw1, &gw2};
  const auto tally = route_tally::of(all, 9, "idle");
  CHECK(tally.misrouted == 4);
  CHECK(tally.reorder == 0);
  CHECK_FALSE(tally.passed());
  CHECK(tally.ends_json() == R"({"sentinel":3})");
}

TEST_CASE("a message delivered for another route key than its user's is misrouted", "[bench]") {
  route_checker gw1(1, 3, 9);
  delivery(0, 4, "user:7").to(gw1);  // user 7 is on this gateway too, but the payload is user 4's
  CHECK(gw1.misrouted() == 1);
  delivery(1, 40, "user:40").to(gw1);  // not a registered user (40 % 3 == 1)
  CHECK(gw1.misrouted() == 2);
  std::vector<std::byte> short_payload(8, std::byte{0});
  const std::string_view key = "user:1";
  gw1.on_delivery(short_payload, std::span(&key, 1), 1);  // too short to say whose it is
  CHECK(gw1.misrouted() == 3);
  // Two keys for one send: not what the workload sends.
  delivery two(2, 1, "user:1");
  const std::string_view both[] = {"user:1", "user:4"};
  gw1.on_delivery(two.payload, both, 1);
  CHECK(gw1.misrouted() == 4);
}

TEST_CASE("on a broker of --address the route key carries the run's prefix, and only the exact key is the user's",
          "[bench]") {
  route_checker gw1(1, 3, 9, "bench.1f2e3d4c.");
  delivery(0, 4, "bench.1f2e3d4c.user:4").to(gw1);
  CHECK(gw1.misrouted() == 0);
  std::uint64_t seq = 1;
  for (const char* wrong : {"user:4", "bench.00000000.user:4", "bench.1f2e3d4c.user:04", "bench.1f2e3d4c.user:4x",
                            "bench.1f2e3d4c.user:", "bench.1f2e3d4c.user:-4"}) {
    INFO(wrong);
    const auto before = gw1.misrouted();
    delivery(seq++, 4, wrong).to(gw1);
    CHECK(gw1.misrouted() == before + 1);
  }
  CHECK(gw1.reorder() == 0);
}

TEST_CASE("a sequence number below the one before it in the same inbox counts as a reorder", "[bench]") {
  route_checker gw2(2, 3, 9);
  delivery(3, 2, "user:2").to(gw2);
  delivery(7, 5, "user:5").to(gw2);
  delivery(6, 8, "user:8").to(gw2);  // deliberately reordered
  delivery(8, 2, "user:2").to(gw2);
  CHECK(gw2.reorder() == 1);
  CHECK(gw2.misrouted() == 0);
  CHECK(gw2.received() == 4);
  const route_checker* all[] = {&gw2};
  const auto tally = route_tally::of(all, 9, "idle");
  CHECK(tally.reorder == 1);
  CHECK_FALSE(tally.passed());
  // Gaps are not reorders: the broker may drop for a slow consumer.
  route_checker gw0(0, 3, 9);
  delivery(0, 0, "user:0").to(gw0);
  delivery(100, 3, "user:3").to(gw0);
  CHECK(gw0.reorder() == 0);
}

TEST_CASE("nothing after a gateway's sentinel is counted", "[bench]") {
  route_checker gw0(0, 3, 9);
  delivery(route_sentinel, 0, "user:0").to(gw0);
  delivery(0, 1, "user:1").to(gw0);
  CHECK(gw0.received() == 0);
  CHECK(gw0.misrouted() == 0);
}

TEST_CASE("the tally gives per-gateway minimum and maximum and why each gateway stopped", "[bench]") {
  // 6 gateways, 4 users: gateways 4 and 5 have no users.
  std::deque<route_checker> gws;  // not movable: the gateways' threads hold them
  for (int g = 0; g < 6; ++g) gws.emplace_back(g, 6, 4);
  delivery(0, 0, "user:0").to(gws[0]);
  delivery(1, 0, "user:0").to(gws[0]);
  delivery(2, 1, "user:1").to(gws[1]);
  delivery(route_sentinel, 0, "user:0").to(gws[0]);
  delivery(route_sentinel, 1, "user:1").to(gws[1]);
  std::vector<const route_checker*> all;
  for (const auto& g : gws) all.push_back(&g);
  const auto tally = route_tally::of(all, 4, "idle");
  CHECK(tally.received == 3);
  CHECK(tally.min == 0);
  CHECK(tally.max == 2);
  CHECK(tally.passed());
  CHECK(tally.ends_json() == R"({"idle":2,"no_users":2,"sentinel":2})");
}

TEST_CASE("the user picker draws the peers' splitmix64 sequence, uniformly within range", "[bench]") {
  // The peers' rng_below over splitmix64 from seed 7, computed by hand for
  // the first draw: state 7 + golden gamma, mixed, multiplied into [0, n).
  user_picker pick(100'000);
  std::uint64_t z = 7 + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  CHECK(pick.next() == static_cast<std::uint64_t>((static_cast<unsigned __int128>(z) * 100'000) >> 64));
  std::set<std::uint64_t> seen;
  user_picker small(10);
  for (int i = 0; i < 1000; ++i) {
    const auto u = small.next();
    CHECK(u < 10);
    seen.insert(u);
  }
  CHECK(seen.size() == 10);
}
