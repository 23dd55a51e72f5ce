// End to end: TLS on the client port, with certificates the test makes
// with the openssl tool (tests/support/tls_certs.hpp): a real broker, real
// TLS sessions through the client library.

#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/tls_certs.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <filesystem>
#include <fstream>
#include <string>

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

TEST_CASE("a client that does not trust the broker's CA refuses the broker with tls_failed", "[e2e][tls]") {
  test_server server(tls_config());
  CHECK(connect_error(tls_client(server.port(), "other-ca")) == errc::tls_failed);
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

TEST_CASE("a reload makes new connections use the certificate now in the files; one that does not load is not used",
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
