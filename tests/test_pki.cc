#include "tests/test_pki.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace turnstile::testing {

struct TestPki::Ca {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  ~Ca() {
    EVP_PKEY_free(key);
    X509_free(cert);
  }
};

namespace {

void Check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("test PKI: ") + what);
}

void AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  Check(ext != nullptr, "extension");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A certificate for `key`, signed by issuer_key (issuer null: self-signed).
X509* MakeCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key,
               int64_t serial, int64_t not_before_s, int64_t not_after_s) {
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), static_cast<long>(serial));
  X509_gmtime_adj(X509_getm_notBefore(x), static_cast<long>(not_before_s));
  X509_gmtime_adj(X509_getm_notAfter(x), static_cast<long>(not_after_s));
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  if (!cn.empty()) {
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  }
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>("turnstile tests"), -1, -1, 0);
  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
  (void)issuer_key;
  return x;
}

void WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  Check(f != nullptr, "open for writing");
  if (cert) PEM_write_X509(f, cert);
  if (key) PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  if (key) chmod(path.c_str(), 0600);
}

}  // namespace

TestPki::TestPki() {
  char tmpl[] = "/tmp/turnstile-pki-XXXXXX";
  Check(mkdtemp(tmpl) != nullptr, "mkdtemp");
  dir_ = tmpl;
  AddCa("ca");
}

TestPki::~TestPki() {
  std::string cmd = "rm -rf '" + dir_ + "'";
  (void)std::system(cmd.c_str());
}

std::string TestPki::AddCa(const std::string& name) {
  auto ca = std::make_unique<Ca>();
  ca->key = EVP_EC_gen("P-256");
  Check(ca->key != nullptr, "key");
  ca->cert = MakeCert(ca->key, "turnstile test CA " + name, nullptr, nullptr, serial_++, -86400,
                      7 * 86400);
  AddExt(ca->cert, ca->cert, NID_basic_constraints, "critical,CA:TRUE");
  AddExt(ca->cert, ca->cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  AddExt(ca->cert, ca->cert, NID_subject_key_identifier, "hash");
  Check(X509_sign(ca->cert, ca->key, EVP_sha256()) > 0, "sign CA");
  WritePem(ca_file(name), ca->cert, nullptr);
  cas_[name] = std::move(ca);
  return ca_file(name);
}

TestPki::Files TestPki::IssueServer(const std::string& name) {
  CertSpec spec;
  spec.cn = "replica";
  spec.san = "DNS:localhost,IP:127.0.0.1";
  return Issue(name, spec);
}

TestPki::Files TestPki::IssueClient(const std::string& name, const std::string& identity,
                                    const std::string& issuer) {
  CertSpec spec;
  spec.cn = identity.substr(identity.rfind('/') + 1);
  spec.san = "URI:" + identity;
  spec.issuer = issuer;
  spec.server = false;
  return Issue(name, spec);
}

TestPki::Files TestPki::Issue(const std::string& name, const CertSpec& spec) {
  auto it = cas_.find(spec.issuer);
  Check(it != cas_.end(), "unknown issuer");
  Ca& ca = *it->second;
  EVP_PKEY* key = EVP_EC_gen("P-256");
  Check(key != nullptr, "key");
  X509* x = MakeCert(key, spec.cn, ca.cert, ca.key, serial_++, spec.not_before_s, spec.not_after_s);
  AddExt(x, ca.cert, NID_basic_constraints, "critical,CA:FALSE");
  AddExt(x, ca.cert, NID_key_usage, "critical,digitalSignature,keyEncipherment");
  std::string eku;
  if (spec.server) eku = "serverAuth";
  if (spec.client) eku += eku.empty() ? "clientAuth" : ",clientAuth";
  if (!eku.empty()) AddExt(x, ca.cert, NID_ext_key_usage, eku);
  if (!spec.san.empty()) AddExt(x, ca.cert, NID_subject_alt_name, spec.san);
  AddExt(x, ca.cert, NID_authority_key_identifier, "keyid");
  Check(X509_sign(x, ca.key, EVP_sha256()) > 0, "sign");
  Files f{dir_ + "/" + name + ".crt", dir_ + "/" + name + ".key"};
  WritePem(f.cert, x, nullptr);
  WritePem(f.key, nullptr, key);
  X509_free(x);
  EVP_PKEY_free(key);
  return f;
}

void TestPki::WriteCrl(const std::string& path, const std::vector<std::string>& revoked,
                       const std::string& ca_name, int64_t next_update_s) {
  auto it = cas_.find(ca_name);
  Check(it != cas_.end(), "unknown CA");
  Ca& ca = *it->second;
  X509_CRL* crl = X509_CRL_new();
  X509_CRL_set_version(crl, 1);
  X509_CRL_set_issuer_name(crl, X509_get_subject_name(ca.cert));
  ASN1_TIME* t = ASN1_TIME_new();
  X509_gmtime_adj(t, -3600);
  X509_CRL_set1_lastUpdate(crl, t);
  X509_gmtime_adj(t, static_cast<long>(next_update_s));
  X509_CRL_set1_nextUpdate(crl, t);
  for (const std::string& file : revoked) {
    FILE* f = std::fopen(file.c_str(), "r");
    Check(f != nullptr, "open a certificate to revoke");
    X509* x = PEM_read_X509(f, nullptr, nullptr, nullptr);
    std::fclose(f);
    Check(x != nullptr, "read a certificate to revoke");
    X509_REVOKED* r = X509_REVOKED_new();
    X509_REVOKED_set_serialNumber(r, X509_get_serialNumber(x));
    X509_gmtime_adj(t, -60);
    X509_REVOKED_set_revocationDate(r, t);
    X509_CRL_add0_revoked(crl, r);
    X509_free(x);
  }
  ASN1_TIME_free(t);
  X509_CRL_sort(crl);
  Check(X509_CRL_sign(crl, ca.key, EVP_sha256()) > 0, "sign CRL");
  FILE* f = std::fopen(path.c_str(), "w");
  Check(f != nullptr, "open for writing");
  PEM_write_X509_CRL(f, crl);
  std::fclose(f);
  X509_CRL_free(crl);
}

std::string TestPki::ca_file(const std::string& name) const { return dir_ + "/" + name + ".crt"; }

}  // namespace turnstile::testing
