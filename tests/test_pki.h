// Certificates made per test run (nothing secret is committed): CAs and
// certificates they issue, with any SANs and validity, written as PEM files
// in a temporary directory that is removed afterwards. OpenSSL's API, so a
// certificate can also be already expired.
#ifndef TURNSTILE_TESTS_TEST_PKI_H_
#define TURNSTILE_TESTS_TEST_PKI_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace turnstile::testing {

struct CertSpec {
  std::string cn;   // subject CN ("" = none)
  std::string san;  // OpenSSL SAN syntax, e.g. "URI:spiffe://x/y,DNS:localhost,IP:127.0.0.1"
  std::string issuer = "ca";  // a CA made by AddCa
  int64_t not_before_s = -3600;  // validity, in seconds from now
  int64_t not_after_s = 86400;
  bool server = true;  // extendedKeyUsage serverAuth
  bool client = true;  // extendedKeyUsage clientAuth
};

class TestPki {
 public:
  struct Files {
    std::string cert, key;
  };
  // A directory under /tmp with one CA named "ca".
  TestPki();
  ~TestPki();  // removes the directory
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  // Another CA (self-signed); its certificate file.
  std::string AddCa(const std::string& name);
  // <dir>/<name>.crt and .key, issued by spec.issuer.
  Files Issue(const std::string& name, const CertSpec& spec);
  // A replica's certificate for loopback (CN "replica", SANs localhost and
  // 127.0.0.1).
  Files IssueServer(const std::string& name = "server");
  // A client certificate for `identity`: its URI SAN, the CN its last path
  // segment, issued by CA `issuer`.
  Files IssueClient(const std::string& name, const std::string& identity,
                    const std::string& issuer = "ca");
  std::string ca_file(const std::string& name = "ca") const;
  // A PEM CRL signed by CA `ca` revoking the certificates in `revoked`
  // (files made by Issue), valid from an hour ago for `next_update_s`
  // seconds (negative: already past its next update), written to `path`.
  void WriteCrl(const std::string& path, const std::vector<std::string>& revoked,
                const std::string& ca = "ca", int64_t next_update_s = 86400);
  const std::string& dir() const { return dir_; }

 private:
  struct Ca;
  std::string dir_;
  std::map<std::string, std::unique_ptr<Ca>> cas_;
  int64_t serial_ = 1;
};

}  // namespace turnstile::testing

#endif  // TURNSTILE_TESTS_TEST_PKI_H_
