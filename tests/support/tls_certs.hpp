#pragma once
// Certificates for TLS tests, made at run time with the `openssl` command
// line tool into a temporary folder (EC P-256 keys, valid two days): two
// CAs, and from each a broker certificate (subjectAltName 127.0.0.1 and
// localhost) and a client certificate.

#include "tests/support/temp_dir.hpp"

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace switchyard::test {

class tls_certs {
 public:
  tls_certs() {
    for (const char* ca : {"ca", "other-ca"}) {
      run("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=" + std::string(ca) +
          " -keyout " + path(std::string(ca) + ".key") + " -out " + path(std::string(ca) + ".pem"));
      issue(ca, std::string(ca) + "-broker", "broker",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
      issue(ca, std::string(ca) + "-client", "client", "extendedKeyUsage=clientAuth\n");
    }
  }

  // <name>.pem / <name>.key, name one of: ca, other-ca, ca-broker,
  // ca-client, other-ca-broker, other-ca-client.
  std::string pem(const std::string& name) const { return path(name + ".pem"); }
  std::string key(const std::string& name) const { return path(name + ".key"); }
  std::string path(const std::string& file) const { return (dir_.path() / file).string(); }

 private:
  void run(const std::string& args) const {
    const std::string cmd = "openssl " + args + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("tls_certs: failed: " + cmd);
  }
  void issue(const std::string& ca, const std::string& name, const std::string& cn, const std::string& ext) const {
    std::ofstream(path(name + ".ext")) << ext;
    run("req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=" + cn + " -keyout " + key(name) +
        " -out " + path(name + ".csr"));
    run("x509 -req -days 2 -set_serial " + std::to_string(++serial_) + " -in " + path(name + ".csr") + " -CA " +
        pem(ca) + " -CAkey " + key(ca) + " -extfile " + path(name + ".ext") + " -out " + pem(name));
  }

  temp_dir dir_{"switchyard-tls"};
  mutable int serial_ = 100;
};

}  // namespace switchyard::test
