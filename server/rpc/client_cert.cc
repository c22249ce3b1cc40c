#include "server/rpc/client_cert.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/security/auth_context.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/rpc/cert_names.h"
namespace turnstile {

namespace {

struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
using X509Ptr = std::unique_ptr<X509, X509Deleter>;

std::vector<X509Ptr> ReadCerts(const std::string& pem) {
  std::vector<X509Ptr> out;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return out;
  while (X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) out.emplace_back(x);
  ERR_clear_error();  // the read that ends the loop leaves "no start line"
  BIO_free(bio);
  return out;
}

}  // namespace

struct ClientCertVerifier::Trust {
  X509_STORE* store = nullptr;
  size_t crls = 0;
  ~Trust() {
    if (store != nullptr) X509_STORE_free(store);
  }
};

namespace {

struct CrlDeleter {
  void operator()(X509_CRL* c) const { X509_CRL_free(c); }
};
using CrlPtr = std::unique_ptr<X509_CRL, CrlDeleter>;

// Every PEM CRL in `pem`; INVALID_ARGUMENT naming the first bad one by
// number (never its bytes).
absl::StatusOr<std::vector<CrlPtr>> ReadCrls(const std::string& pem) {
  std::vector<CrlPtr> out;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return absl::ResourceExhaustedError("out of memory");
  while (X509_CRL* c = PEM_read_bio_X509_CRL(bio, nullptr, nullptr, nullptr)) out.emplace_back(c);
  const unsigned long err = ERR_peek_last_error();
  ERR_clear_error();
  BIO_free(bio);
  // The read that ends the loop fails with "no start line" at the end of
  // the text; any other failure is a damaged CRL.
  if (err != 0 && ERR_GET_REASON(err) != PEM_R_NO_START_LINE) {
    return absl::InvalidArgumentError(
        absl::StrCat("CRL ", out.size() + 1, " cannot be parsed (", ERR_reason_error_string(err),
                     ")"));
  }
  if (out.empty()) return absl::InvalidArgumentError("holds no PEM CRL (-----BEGIN X509 CRL-----)");
  return out;
}

// An expired CRL still revokes what it lists; only its age is forgiven,
// as etcd's --client-crl-file does: a CA that is late to publish must not
// lock every client out. (Revoked serials are what the file is for.)
int ForgiveCrlAge(int ok, X509_STORE_CTX* ctx) {
  if (ok == 0) {
    const int err = X509_STORE_CTX_get_error(ctx);
    if (err == X509_V_ERR_CRL_HAS_EXPIRED || err == X509_V_ERR_CRL_NOT_YET_VALID) return 1;
  }
  return ok;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ClientCertVerifier::Trust>> ClientCertVerifier::MakeTrust(
    const std::string& ca_pem, const std::string& crl_pem) const {
  auto cas = ReadCerts(ca_pem);
  if (cas.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca-file holds no PEM certificate");
  }
  auto t = std::make_shared<Trust>();
  t->store = X509_STORE_new();
  if (t->store == nullptr) return absl::ResourceExhaustedError("out of memory");
  for (auto& ca : cas) X509_STORE_add_cert(t->store, ca.get());
  if (crl_file_ == nullptr) return std::shared_ptr<const Trust>(std::move(t));
  auto crls = ReadCrls(crl_pem);
  if (!crls.ok()) return crls.status();
  for (size_t i = 0; i < crls->size(); ++i) {
    X509_CRL* crl = (*crls)[i].get();
    // Signed by one of the client CAs, or it would silently check nothing.
    bool signed_by_ca = false;
    for (auto& ca : cas) {
      if (X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_subject_name(ca.get())) != 0) continue;
      EVP_PKEY* key = X509_get0_pubkey(ca.get());
      if (key != nullptr && X509_CRL_verify(crl, key) == 1) signed_by_ca = true;
    }
    ERR_clear_error();
    if (!signed_by_ca) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CRL ", i + 1, " is not signed by a CA of --tls-client-ca-file"));
    }
    X509_STORE_add_crl(t->store, crl);
  }
  t->crls = crls->size();
  // The leaf is checked against its issuer's CRL: every CA that issues
  // client certificates needs one in the file.
  X509_STORE_set_flags(t->store, X509_V_FLAG_CRL_CHECK);
  X509_STORE_set_verify_cb(t->store, ForgiveCrlAge);
  return std::shared_ptr<const Trust>(std::move(t));
}

absl::StatusOr<std::unique_ptr<ClientCertVerifier>> ClientCertVerifier::Create(
    const std::string& ca_pem, const std::string& crl_path, const std::string& ca_path) {
  auto v = std::unique_ptr<ClientCertVerifier>(new ClientCertVerifier());
  // Not shared yet: the locks only satisfy the analysis (start-up, once).
  absl::MutexLock reload(&v->reload_mu_);
  v->ca_pem_ = ca_pem;
  if (!ca_path.empty()) {
    v->ca_file_ = std::make_unique<WatchedFile>(ca_path);
    auto text = v->ca_file_->ReadNow();  // remembered as seen
    if (text.ok()) v->ca_pem_ = *text;
  }
  std::string crl_pem;
  if (!crl_path.empty()) {
    v->crl_file_ = std::make_unique<WatchedFile>(crl_path);
    auto text = v->crl_file_->ReadNow();
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--tls-client-crl-file: ", text.status().message()));
    }
    crl_pem = *text;
  }
  v->crl_pem_ = crl_pem;
  auto trust = v->MakeTrust(v->ca_pem_, crl_pem);
  if (!trust.ok()) {
    if (crl_path.empty() || absl::StrContains(trust.status().message(), "--tls-client-ca-file holds")) {
      return trust.status();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-client-crl-file ", crl_path, ": ", trust.status().message()));
  }
  {
    absl::MutexLock l(&v->mu_);
    v->trust_ = *trust;
  }
  return v;
}

ClientCertVerifier::~ClientCertVerifier() = default;

std::shared_ptr<const ClientCertVerifier::Trust> ClientCertVerifier::trust() const {
  absl::MutexLock l(&mu_);
  return trust_;
}

bool ClientCertVerifier::ReloadCrl(bool force) {
  absl::MutexLock reload(&reload_mu_);
  if (crl_file_ == nullptr) return false;
  auto text = crl_file_->Changed(force);
  if (!text.ok()) {
    std::fprintf(stderr, "turnstiled: client CRL %s: %s; the previous CRL stays in force\n",
                 crl_file_->path().c_str(), std::string(text.status().message()).c_str());
    return false;
  }
  if (!text->has_value()) return false;
  auto trust = MakeTrust(ca_pem_, **text);
  if (!trust.ok()) {
    std::fprintf(stderr, "turnstiled: client CRL %s rejected: %s; the previous CRL stays in force\n",
                 crl_file_->path().c_str(), std::string(trust.status().message()).c_str());
    return false;
  }
  crl_pem_ = **text;
  {
    absl::MutexLock l(&mu_);
    trust_ = *trust;
    cache_.clear();  // every identity is verified again under the new CRL
  }
  std::fprintf(stderr, "turnstiled: client CRL %s loaded (%zu CRLs)\n", crl_file_->path().c_str(),
               (*trust)->crls);
  return true;
}

bool ClientCertVerifier::ReloadCa(bool force) {
  absl::MutexLock reload(&reload_mu_);
  if (ca_file_ == nullptr) return false;
  auto text = ca_file_->Changed(force);
  if (!text.ok()) {
    std::fprintf(stderr, "turnstiled: client CA %s: %s; the previous CA bundle stays in force\n",
                 ca_file_->path().c_str(), std::string(text.status().message()).c_str());
    return false;
  }
  if (!text->has_value()) return false;
  auto trust = MakeTrust(**text, crl_pem_);
  if (!trust.ok()) {
    std::fprintf(stderr,
                 "turnstiled: client CA %s rejected: %s; the previous CA bundle stays in force\n",
                 ca_file_->path().c_str(), std::string(trust.status().message()).c_str());
    return false;
  }
  ca_pem_ = **text;
  {
    absl::MutexLock l(&mu_);
    trust_ = *trust;
    cache_.clear();  // every identity is verified again under the new CAs
  }
  // Which CA of the bundle expires first, and when (UTC): the next
  // rotation is due before it.
  std::vector<X509Ptr> cas = ReadCerts(ca_pem_);
  std::string first;
  int64_t first_at = 0;
  for (auto& ca : cas) {
    const CertNames n = NamesOf(ca.get());
    if (first.empty() || (n.not_after != 0 && n.not_after < first_at)) {
      first = n.subject;
      first_at = n.not_after;
    }
  }
  std::fprintf(stderr, "turnstiled: client CA %s loaded (%zu certificates; the first to expire: "
               "\"%s\", valid until %s)\n", ca_file_->path().c_str(), cas.size(), first.c_str(),
               UtcTime(first_at).c_str());
  return true;
}

absl::StatusOr<std::string> ClientCertVerifier::Identify(const grpc::AuthContext& ctx) {
  auto leaf = ctx.FindPropertyValues("x509_pem_cert");
  if (leaf.empty()) {
    return absl::UnauthenticatedError(
        "no client certificate: this replica requires mutual TLS (--tls-client-ca-file)");
  }
  std::string chain;
  for (const auto& c : ctx.FindPropertyValues("x509_pem_cert_chain")) chain.append(c.data(), c.size());
  return IdentifyPem(std::string(leaf.front().data(), leaf.front().size()), chain);
}

absl::StatusOr<std::string> ClientCertVerifier::IdentifyPem(const std::string& leaf_pem,
                                                           const std::string& chain_pem) {
  const time_t now = std::time(nullptr);
  std::shared_ptr<const Trust> trust;
  {
    absl::MutexLock l(&mu_);
    auto it = cache_.find(leaf_pem);
    if (it != cache_.end() && now < it->second.not_after) return it->second.identity;
    trust = trust_;
  }
  auto leaf = ReadCerts(leaf_pem);
  if (leaf.empty()) return absl::UnauthenticatedError("the client certificate cannot be parsed");
  auto chain = ReadCerts(chain_pem);
  STACK_OF(X509)* untrusted = sk_X509_new_null();
  for (auto& c : chain) sk_X509_push(untrusted, c.get());
  X509_STORE_CTX* vctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(vctx, trust->store, leaf[0].get(), untrusted);
  X509_STORE_CTX_set_purpose(vctx, X509_PURPOSE_SSL_CLIENT);
  const int ok = X509_verify_cert(vctx);
  const int err = X509_STORE_CTX_get_error(vctx);
  X509_STORE_CTX_free(vctx);
  sk_X509_free(untrusted);
  ERR_clear_error();
  const CertNames names = NamesOf(leaf[0].get());
  // A refusal names the certificate (which one keeps being refused); the
  // audit line gets the names as fields of their own (cert_names.h).
  auto refused = [&names](const std::string& why) {
    absl::Status s = absl::UnauthenticatedError(
        absl::StrCat(why, "; the certificate: ", DescribeCertificate(names)));
    AttachRefusedCertificate(names, &s);
    return s;
  };
  if (ok != 1) {
    if (err == X509_V_ERR_CERT_REVOKED) {
      return refused(
          "client certificate refused: certificate revoked (listed in --tls-client-crl-file)");
    }
    if (err == X509_V_ERR_UNABLE_TO_GET_CRL) {
      return refused(
          "client certificate refused: unable to get certificate CRL (--tls-client-crl-file has "
          "no CRL of the certificate's issuer)");
    }
    return refused(absl::StrCat(
        "client certificate refused: ", X509_verify_cert_error_string(err),
        " (it must be valid now and issued by --tls-client-ca-file)"));
  }
  const std::string& identity = names.identity;
  if (identity.empty()) {
    return refused("client certificate names nobody: no URI SAN, DNS SAN or subject CN");
  }
  const time_t not_after = static_cast<time_t>(names.not_after);
  absl::MutexLock l(&mu_);
  if (trust != trust_) return identity;  // a new CRL came meanwhile: do not cache
  if (cache_.size() >= 4096) cache_.clear();  // bounded; rebuilt by the next calls
  cache_[leaf_pem] = Cached{identity, not_after};
  return identity;
}

}  // namespace turnstile
