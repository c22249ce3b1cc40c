#include "server/rpc/serving_cert.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "absl/strings/str_cat.h"
#include "server/rpc/cert_names.h"

namespace turnstile {

namespace {

std::string OpensslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

}  // namespace

absl::StatusOr<int64_t> CheckCertificatePair(const std::string& cert_pem,
                                             const std::string& key_pem) {
  BIO* cb = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = cb != nullptr ? PEM_read_bio_X509(cb, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(cb);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate file holds no PEM certificate (", OpensslError(), ")"));
  }
  BIO* kb = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = kb != nullptr ? PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(kb);
  if (key == nullptr) {
    X509_free(cert);
    ERR_clear_error();
    return absl::InvalidArgumentError("the key file holds no PEM private key");
  }
  const bool match = X509_check_private_key(cert, key) == 1;
  ERR_clear_error();
  EVP_PKEY_free(key);
  struct tm t {};
  const bool dated = ASN1_TIME_to_tm(X509_get0_notAfter(cert), &t) == 1;
  X509_free(cert);
  if (!match) {
    return absl::InvalidArgumentError(
        "the private key does not belong to the certificate (a mismatched pair)");
  }
  if (!dated) return absl::InvalidArgumentError("the certificate's notAfter cannot be read");
  return static_cast<int64_t>(timegm(&t));
}

absl::StatusOr<std::unique_ptr<ServingCertificate>> ServingCertificate::Load(
    const std::string& cert_path, const std::string& key_path, bool request_client_cert) {
  auto sc = std::unique_ptr<ServingCertificate>(new ServingCertificate(cert_path, key_path));
  // Not shared yet: the locks only satisfy the analysis (start-up, once).
  absl::MutexLock reload(&sc->reload_mu_);
  auto cert = sc->cert_file_.ReadNow();
  if (!cert.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-cert-file: ", cert.status().message()));
  }
  auto key = sc->key_file_.ReadNow();
  if (!key.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-key-file: ", key.status().message()));
  }
  auto not_after = CheckCertificatePair(*cert, *key);
  if (!not_after.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-cert-file ", cert_path, " and --tls-key-file ",
                                                   key_path, ": ", not_after.status().message()));
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/turnstiled-tls-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError("cannot make a private directory for the TLS pair");
  }
  sc->dir_ = tmpl;
  sc->pair_path_ = sc->dir_ + "/pair.pem";
  if (absl::Status s = sc->Publish(*cert, *key); !s.ok()) return s;
  sc->cert_latest_ = *cert;
  sc->key_latest_ = *key;
  {
    absl::MutexLock l(&sc->mu_);
    sc->not_after_ = *not_after;
  }
  // The same file is both the key file and the certificate file: PEM
  // readers skip the blocks of the other kind.
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      sc->pair_path_, sc->pair_path_, /*refresh_interval_sec=*/1);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  // Mutual TLS: ask for a client certificate but let the call through to
  // judge it (ClientCertVerifier): a bad one is then a clear
  // UNAUTHENTICATED status, not a failed handshake. The handshake still
  // proves the client holds the certificate's key.
  options.set_cert_request_type(request_client_cert
                                    ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_BUT_DONT_VERIFY
                                    : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  sc->credentials_ = grpc::experimental::TlsServerCredentials(options);
  if (sc->credentials_ == nullptr) return absl::InternalError("gRPC refused the TLS options");
  return sc;
}

ServingCertificate::~ServingCertificate() {
  if (!pair_path_.empty()) unlink(pair_path_.c_str());
  if (!dir_.empty()) rmdir(dir_.c_str());
}

absl::Status ServingCertificate::Publish(const std::string& cert_pem, const std::string& key_pem) {
  const std::string tmp = pair_path_ + ".new";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  std::string both = key_pem;
  if (!both.empty() && both.back() != '\n') both.push_back('\n');
  both += cert_pem;
  size_t off = 0;
  while (off < both.size()) {
    ssize_t n = write(fd, both.data() + off, both.size() - off);
    if (n <= 0) {
      close(fd);
      return absl::InternalError(absl::StrCat("cannot write ", tmp));
    }
    off += static_cast<size_t>(n);
  }
  fsync(fd);
  close(fd);
  if (rename(tmp.c_str(), pair_path_.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp));
  }
  return absl::OkStatus();
}

bool ServingCertificate::Reload(bool force) {
  absl::MutexLock reload(&reload_mu_);
  auto cert = cert_file_.Changed(force);
  auto key = key_file_.Changed(force);
  if (!cert.ok() || !key.ok()) {
    std::fprintf(stderr, "turnstiled: TLS certificate %s / key %s: %s; the previous pair stays\n",
                 cert_file_.path().c_str(), key_file_.path().c_str(),
                 std::string((!cert.ok() ? cert.status() : key.status()).message()).c_str());
    return false;
  }
  if (!cert->has_value() && !key->has_value()) return false;
  // The latest bytes of each file, whether or not they were accepted: a
  // rotation may write the certificate first and the key a moment later.
  if (cert->has_value()) cert_latest_ = **cert;
  if (key->has_value()) key_latest_ = **key;
  const std::string new_cert = cert_latest_, new_key = key_latest_;
  auto not_after = CheckCertificatePair(new_cert, new_key);
  if (!not_after.ok()) {
    // Often half of a rotation (the certificate written, the key not yet):
    // the next change of either file is checked again.
    std::fprintf(stderr, "turnstiled: TLS certificate %s / key %s rejected: %s; the previous "
                 "pair stays in force\n", cert_file_.path().c_str(), key_file_.path().c_str(),
                 std::string(not_after.status().message()).c_str());
    return false;
  }
  if (absl::Status s = Publish(new_cert, new_key); !s.ok()) {
    std::fprintf(stderr, "turnstiled: TLS pair not put in force: %s\n",
                 std::string(s.message()).c_str());
    return false;
  }
  {
    absl::MutexLock l(&mu_);
    not_after_ = *not_after;
  }
  std::fprintf(stderr, "turnstiled: TLS certificate %s reloaded (valid until %s)\n",
               cert_file_.path().c_str(), UtcTime(*not_after).c_str());
  return true;
}

int64_t ServingCertificate::not_after() const {
  absl::MutexLock l(&mu_);
  return not_after_;
}

}  // namespace turnstile
