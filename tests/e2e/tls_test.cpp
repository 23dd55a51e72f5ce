// End to end: TLS on the client port, with certificates the test makes
// with the openssl tool (tests/support/tls_certs.hpp): a real broker, real
// TLS sessions through the client library.

#include "protocol/limits.hpp"
#include "switchyard/client.hpp"
#include "tests/support/byte_pattern.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/tls_certs.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <optional>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace switchyard;
using switchyard::test::test_server;
using switchyard::test::tls_certs;
using switchyard::test::wait_until;

namespace {

// Made once per test run: the openssl tool takes a moment per certificate.
const tls_certs& certs() {
  static const tls_certs made;
  return made;
}

broker::server_config tls_config(bool verify_client = false) {
  auto cfg = test_server::default_config();
  cfg.tls_cert = certs().pem("ca-broker");
  cfg.tls_key = certs().key("ca-broker");
  if (verify_client) {
    cfg.tls_ca = certs().pem("ca");
    cfg.tls_verify_client = true;
  }
  return cfg;
}

// Options for a TLS client of `port` that trusts `ca`, with the client
// certificate `cert` ("" = none).
client_options tls_client(std::uint16_t port, const std::string& ca = "ca", const std::string& cert = "") {
  client_options o;
  o.port = port;
  o.client_name = "tls-test";
  o.reconnect.enabled = false;
  o.connect_timeout = std::chrono::seconds(10);  // a hang would show as errc::timeout
  o.tls.enabled = true;
  o.tls.ca_file = certs().pem(ca);
  if (!cert.empty()) {
    o.tls.cert_file = certs().pem(cert);
    o.tls.key_file = certs().key(cert);
  }
  return o;
}

std::error_code connect_error(const client_options& o) {
  auto c = client::connect(o);
  return c ? std::error_code{} : c.error();
}

// A TLS client made by hand with OpenSSL, so that the test decides which
// records go out together: what it writes stays in a memory BIO until
// send_pending() sends all of it with one send(); what it reads comes
// from the socket through another memory BIO, each recv within 5 s. No
// verification of the broker (not what these tests are about).
class manual_tls_client {
 public:
  explicit manual_tls_client(std::uint16_t port) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    REQUIRE(ctx_ != nullptr);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
    ssl_ = SSL_new(ctx_);
    REQUIRE(ssl_ != nullptr);
    in_bio_ = BIO_new(BIO_s_mem());
    out_bio_ = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl_, in_bio_, out_bio_);
    SSL_set_connect_state(ssl_);
  }
  ~manual_tls_client() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
    ::close(fd_);
  }
  manual_tls_client(const manual_tls_client&) = delete;
  manual_tls_client& operator=(const manual_tls_client&) = delete;

  // Runs the handshake; the client's last flight (its Finished) stays
  // unsent. Bounded: a TLS 1.3 handshake takes a few reads.
  bool handshake() {
    for (int turn = 0; turn < 50; ++turn) {
      const int r = SSL_connect(ssl_);
      if (r == 1) return true;
      if (SSL_get_error(ssl_, r) != SSL_ERROR_WANT_READ) return false;
      send_pending();
      if (!receive()) return false;
    }
    return false;
  }
  // Seals `bytes` into a record, kept until send_pending().
  void write(protocol::bytes_view bytes) {
    std::size_t written = 0;
    REQUIRE(SSL_write_ex(ssl_, bytes.data(), bytes.size(), &written) == 1);
  }
  void send_pending() {
    char* data = nullptr;
    const long n = BIO_get_mem_data(out_bio_, &data);
    if (n > 0) REQUIRE(::send(fd_, data, static_cast<std::size_t>(n), MSG_NOSIGNAL) == n);
    (void)BIO_reset(out_bio_);
  }
  // The next frame the broker sends, or nothing within the read timeout.
  std::optional<test::raw_frame> read_frame() {
    if (!fill(protocol::frame_header_size)) return std::nullopt;
    const std::size_t total = protocol::frame_header_size + protocol::read_frame_length(in_.data());
    if (!fill(total)) return std::nullopt;
    test::raw_frame f;
    f.words.resize((total + 7) / 8);
    f.size = total;
    std::memcpy(f.words.data(), in_.data(), total);
    in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(total));
    return f;
  }

 private:
  // One recv from the socket into OpenSSL's input; false on timeout or close.
  bool receive() {
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    BIO_write(in_bio_, buf, static_cast<int>(n));
    return true;
  }
  bool fill(std::size_t n) {
    // Bounded: every turn decrypts bytes or receives some, else gives up.
    for (int turn = 0; turn < 1000 && in_.size() < n; ++turn) {
      std::uint8_t buf[16384];
      std::size_t got = 0;
      if (SSL_read_ex(ssl_, buf, sizeof buf, &got) == 1) {
        in_.insert(in_.end(), buf, buf + got);
        continue;
      }
      if (SSL_get_error(ssl_, 0) != SSL_ERROR_WANT_READ || !receive()) return false;
    }
    return in_.size() >= n;
  }

  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  BIO* in_bio_ = nullptr;   // owned by ssl_
  BIO* out_bio_ = nullptr;  // owned by ssl_
  int fd_ = -1;
  std::vector<std::uint8_t> in_;
};

// The hello as the client library's: request id 1.
std::vector<std::uint8_t> hello_frame() {
  protocol::frame_builder b;
  protocol::hello_fields h;
  h.protocol_major = 1;
  h.client_name = "manual-tls";
  const auto f = b.hello(1, h);
  return {f.begin(), f.end()};
}

}  // namespace

TEST_CASE("a publish over TLS reaches a subscriber over TLS", "[e2e][tls]") {
  test_server server(tls_config());
  auto sub = client::connect(tls_client(server.port()));
  REQUIRE(sub);
  auto pub = client::connect(tls_client(server.port()));
  REQUIRE(pub);
  test::collector<std::string> got;
  REQUIRE((*sub)->subscribe("tls.>", [&](const message& m) { got.add(std::string(m.payload_text())); }));
  // A frame over several records (the broker reads its rest into the
  // connection's own buffer, no more than the frame needs), then a small
  // one. When both end in one record, the small frame stays decrypted in
  // the broker's session with nothing more on the socket, and must still
  // be read (byte_stream::wait_readable). The client library may write
  // them as separate records, so this does not force that case.
  const std::string big(100'000, 'x');
  REQUIRE_FALSE((*pub)->publish("tls.big", big));
  REQUIRE_FALSE((*pub)->publish("tls.small", "hello"));
  REQUIRE_FALSE((*pub)->flush());
  REQUIRE(wait_until([&] { return got.count == 2; }));
  CHECK(got.snapshot() == std::vector<std::string>{big, "hello"});
}

TEST_CASE("frames of every size, many to a record and many records to a frame, arrive intact and in order over TLS",
          "[e2e][tls]") {
  // The broker seals a write's small frames together into 16 KiB records
  // and a large frame's whole records straight from it (the rest with the
  // next frames); the receivers decrypt record after record into one read.
  // Sizes cross every record boundary: 1 byte to 40 000 bytes, in an order
  // that mixes them.
  test_server server(tls_config());
  auto sub = client::connect(tls_client(server.port()));
  REQUIRE(sub);
  auto pub = client::connect(tls_client(server.port()));
  REQUIRE(pub);
  constexpr std::size_t messages = 400;
  const auto size_of = [](std::size_t i) { return i % 3 == 0 ? (i * 7919) % 40'000 + 1 : (i * 131) % 300 + 1; };
  test::collector<std::vector<std::byte>> got;
  REQUIRE((*sub)->subscribe(
      "tls.sizes", [&](const message& m) { got.add(std::vector<std::byte>(m.payload.begin(), m.payload.end())); }));
  for (std::size_t i = 0; i < messages; ++i) REQUIRE_FALSE((*pub)->publish("tls.sizes", test::pattern(size_of(i), i)));
  REQUIRE_FALSE((*pub)->flush());
  REQUIRE(wait_until([&] { return got.count == messages; }));
  const auto all = got.snapshot();
  for (std::size_t i = 0; i < messages; ++i) {
    INFO("message " << i);
    CHECK(all[i] == test::pattern(size_of(i), i));
  }
}

TEST_CASE("a hello that arrives in the same segment as the end of the TLS handshake is answered", "[e2e][tls]") {
  // The broker's session reads ahead: the recv that takes the client's
  // Finished takes the hello's record too, and the socket then stays
  // quiet. The broker must read that record without waiting for more.
  auto cfg = tls_config();
  cfg.hello_timeout = std::chrono::milliseconds(3000);
  test_server server(cfg);
  manual_tls_client c(server.port());
  REQUIRE(c.handshake());
  c.write(hello_frame());
  c.send_pending();  // the Finished and the hello, in one send
  auto f = c.read_frame();
  REQUIRE(f);
  auto decoded = protocol::decode_frame(f->bytes(), protocol::default_max_frame);
  REQUIRE(decoded);
  CHECK((*decoded)->message_type() == protocol::wire::Message::Welcome);
}

TEST_CASE("a client that does not trust the broker's CA refuses the broker with tls_failed", "[e2e][tls]") {
  test_server server(tls_config());
  CHECK(connect_error(tls_client(server.port(), "other-ca")) == errc::tls_failed);
}

TEST_CASE("after connect returns, over TLS or not and either outcome, only the caller and the client hold the loop",
          "[e2e][tls]") {
  // The last reference to an event_loop must be the user's: dropped on the
  // loop's own thread, the loop is only detached, and a process that exits
  // then leaks that thread's OpenSSL state and the attempt's TLS context.
  test_server server(tls_config());
  auto loop = std::make_shared<event_loop>();
  {
    auto c = client::connect(tls_client(server.port()), loop);
    REQUIRE(c);
    CHECK(loop.use_count() == 2);  // here and in the client
  }
  CHECK(loop.use_count() == 1);
  CHECK_FALSE(client::connect(tls_client(server.port(), "other-ca"), loop));
  CHECK(loop.use_count() == 1);
}

TEST_CASE("a client verifies the broker's name: a certificate without it is refused", "[e2e][tls]") {
  test_server server(tls_config());
  auto o = tls_client(server.port());
  o.tls.server_name = "broker.example";  // the certificate names 127.0.0.1 and localhost only
  CHECK(connect_error(o) == errc::tls_failed);
  o.tls.server_name = "localhost";
  CHECK_FALSE(connect_error(o));
}

TEST_CASE("with client verification a client certificate the CA signed is admitted", "[e2e][tls]") {
  test_server server(tls_config(true));
  auto c = client::connect(tls_client(server.port(), "ca", "ca-client"));
  REQUIRE(c);
  CHECK_FALSE((*c)->flush());
}

TEST_CASE("with client verification a client without a certificate is refused", "[e2e][tls]") {
  test_server server(tls_config(true));
  CHECK(connect_error(tls_client(server.port())) == errc::tls_failed);
}

TEST_CASE("with client verification a client certificate from another CA is refused", "[e2e][tls]") {
  test_server server(tls_config(true));
  CHECK(connect_error(tls_client(server.port(), "ca", "other-ca-client")) == errc::tls_failed);
}

TEST_CASE("a plain client on a TLS port is told so with bad_request, not left to time out", "[e2e][tls]") {
  test_server server(tls_config());
  client_options o;
  o.port = server.port();
  o.reconnect.enabled = false;
  o.connect_timeout = std::chrono::seconds(10);
  CHECK(connect_error(o) == errc::bad_request);
}

TEST_CASE("a plain hello on a TLS port is answered with a fatal bad_request with request id 0, then closed",
          "[e2e][tls]") {
  test_server server(tls_config());
  test::raw_connection c(server.port());
  c.send_hello();
  test::raw_frame f;
  const auto* frame = c.next(f);
  REQUIRE(frame != nullptr);
  REQUIRE(frame->message_type() == protocol::wire::Message::Error);
  const auto* e = frame->message_as_Error();
  CHECK(e->code() == protocol::wire::ErrorCode::bad_request);
  CHECK(e->fatal());  // docs/protocol.md §8
  CHECK(frame->request_id() == 0);
  CHECK(c.closed_by_peer());
}

TEST_CASE("a TLS client on a plain port fails with tls_failed, not a timeout", "[e2e][tls]") {
  test_server server;
  CHECK(connect_error(tls_client(server.port())) == errc::tls_failed);
  server.stop();
  // The broker saw a TLS handshake, not a frame: counted as a protocol error.
  CHECK(server.counters().protocol_errors == 1);
}

TEST_CASE("a plain port answers a TLS ClientHello that it does not speak TLS", "[e2e][tls]") {
  test_server server;
  test::raw_connection c(server.port());
  // The start of a ClientHello record: handshake, TLS 1.0 record version,
  // a length, then the handshake message's first bytes.
  const std::array<std::uint8_t, 9> hello{0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4};
  c.send(hello);
  test::raw_frame f;
  const auto* frame = c.next_of(protocol::wire::Message::Error, f);
  REQUIRE(frame != nullptr);
  const auto* e = frame->message_as_Error();
  REQUIRE(e->message() != nullptr);
  CHECK(e->message()->string_view() == "this port does not speak TLS");
  CHECK(c.closed_by_peer());
}

TEST_CASE("a reload makes new connections use the certificate now in the files, and one that does not load is not used",
          "[e2e][tls]") {
  test::temp_dir dir("switchyard-tls-reload");
  const auto cert = (dir.path() / "broker.pem").string();
  const auto key = (dir.path() / "broker.key").string();
  const auto install = [&](const std::string& name) {
    std::filesystem::copy_file(certs().pem(name), cert, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::copy_file(certs().key(name), key, std::filesystem::copy_options::overwrite_existing);
  };
  install("ca-broker");
  auto cfg = test_server::default_config();
  cfg.tls_cert = cert;
  cfg.tls_key = key;
  test_server server(cfg);
  auto before = client::connect(tls_client(server.port(), "ca"));
  REQUIRE(before);
  CHECK(connect_error(tls_client(server.port(), "other-ca")) == errc::tls_failed);

  install("other-ca-broker");
  server.reload();
  CHECK_FALSE(connect_error(tls_client(server.port(), "other-ca")));
  CHECK(connect_error(tls_client(server.port(), "ca")) == errc::tls_failed);
  // The session made before the reload goes on.
  CHECK_FALSE((*before)->flush());

  std::ofstream(cert, std::ios::trunc) << "not a certificate\n";
  server.reload();
  CHECK_FALSE(connect_error(tls_client(server.port(), "other-ca")));
}

TEST_CASE("TLS handshakes in progress count against the connection cap, and beyond it a connection is closed at once",
          "[e2e][tls]") {
  auto cfg = tls_config();
  cfg.max_connections = 2;
  cfg.admin_slots = 1;
  // Long enough that the silent ones still hold their places when the
  // client comes, however slowly this process runs.
  cfg.hello_timeout = std::chrono::milliseconds(5000);
  test_server server(cfg);
  // Three connections (the cap plus the admin slot) that never start their
  // handshake: each holds a place until the hello timeout.
  std::vector<std::unique_ptr<test::raw_connection>> silent;
  for (int i = 0; i < 3; ++i) silent.push_back(std::make_unique<test::raw_connection>(server.port()));
  // A client now finds no place: closed without a handshake, long before
  // the hello timeout would have let it in.
  const auto before = std::chrono::steady_clock::now();
  CHECK(connect_error(tls_client(server.port())) == errc::tls_failed);
  CHECK(std::chrono::steady_clock::now() - before < cfg.hello_timeout);
  CHECK(server.counters().connections_rejected == 1);
  // The silent ones are closed after the hello timeout, which frees their
  // places: the client is admitted then.
  for (auto& c : silent) CHECK(c->closed_by_peer(std::chrono::seconds(10)));
  auto c = client::connect(tls_client(server.port()));
  REQUIRE(c);
  CHECK_FALSE((*c)->flush());
}

TEST_CASE("with TLS handshakes in progress below the cap a client is admitted and its hello checked as usual",
          "[e2e][tls]") {
  auto cfg = tls_config();
  cfg.max_connections = 2;
  cfg.admin_slots = 1;
  cfg.hello_timeout = std::chrono::milliseconds(1500);
  test_server server(cfg);
  // One handshake in progress and one client: two of the three places.
  test::raw_connection silent(server.port());
  auto first = client::connect(tls_client(server.port()));
  REQUIRE(first);
  // The third place: its handshake runs, and its hello counts the open
  // connections only (2, within max_connections).
  auto second = client::connect(tls_client(server.port()));
  REQUIRE(second);
  CHECK_FALSE((*second)->flush());
  CHECK(server.counters().connections_rejected == 0);
}
