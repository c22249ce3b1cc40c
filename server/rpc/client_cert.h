// Caller identities from verified client certificates (mutual TLS): the
// chain, validity, purpose and revocation (--tls-client-crl-file) judged
// against --tls-client-ca-file, and the identity a certificate names. The
// rules for which name is the identity are in protos/turnstile/v1/authz.proto.
#ifndef TURNSTILE_SERVER_RPC_CLIENT_CERT_H_
#define TURNSTILE_SERVER_RPC_CLIENT_CERT_H_

#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/watched_file.h"

namespace grpc {
class AuthContext;
}

namespace turnstile {

// Verifies client certificates against --tls-client-ca-file and names the
// caller. The TLS handshake asks for a certificate without judging it
// (it still proves the client holds the certificate's key); the chain,
// validity and purpose are judged here so that a refusal is a clear
// UNAUTHENTICATED status instead of a failed handshake. Thread-safe.
class ClientCertVerifier {
 public:
  // `crl_path` (--tls-client-crl-file, optional): PEM CRLs of the CAs that
  // issue client certificates; a certificate they list is refused. An
  // error if it cannot be read or holds no CRL signed by a CA of `ca_pem`.
  // `ca_path` (optional): the file `ca_pem` came from, re-read by ReloadCa.
  static absl::StatusOr<std::unique_ptr<ClientCertVerifier>> Create(
      const std::string& ca_pem, const std::string& crl_path = "",
      const std::string& ca_path = "");
  ~ClientCertVerifier();
  // The caller's identity, or UNAUTHENTICATED saying why not.
  absl::StatusOr<std::string> Identify(const grpc::AuthContext& ctx) ABSL_LOCKS_EXCLUDED(mu_);
  // Same, from PEM text (leaf, then the rest of the chain the client sent).
  absl::StatusOr<std::string> IdentifyPem(const std::string& leaf_pem,
                                          const std::string& chain_pem) ABSL_LOCKS_EXCLUDED(mu_);
  // Re-reads the CRL file if it changed (force: even if its stat did not).
  // A new CRL applies to the next call (identities verified earlier are
  // verified again). An invalid file is logged (never its bytes) and the
  // previous CRL stays. Returns whether a new CRL is now in force; false
  // without a CRL file.
  bool ReloadCrl(bool force) ABSL_LOCKS_EXCLUDED(reload_mu_, mu_);
  // Re-reads the client CA bundle if it changed (certificate rotation: a
  // new CA, or old and new together during a cross-signed window). New
  // calls are verified against it; identities verified before are
  // verified again; open streams are not disturbed. An invalid bundle is
  // logged and the previous one stays. False without `ca_path`.
  bool ReloadCa(bool force) ABSL_LOCKS_EXCLUDED(reload_mu_, mu_);

 private:
  ClientCertVerifier() = default;
  struct Trust;  // the CAs and CRLs one verification uses (an X509_STORE)
  // A Trust from the CA bundle and the CRL file's text, or why not.
  absl::StatusOr<std::shared_ptr<const Trust>> MakeTrust(const std::string& ca_pem,
                                                         const std::string& crl_pem) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);
  std::shared_ptr<const Trust> trust() const ABSL_LOCKS_EXCLUDED(mu_);
  struct Cached {
    std::string identity;
    time_t not_after = 0;
  };
  // Serializes the reloads; taken before mu_.
  absl::Mutex reload_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::string ca_pem_ ABSL_GUARDED_BY(reload_mu_);
  std::string crl_pem_ ABSL_GUARDED_BY(reload_mu_);  // the CRLs in force
  std::unique_ptr<WatchedFile> ca_file_ ABSL_GUARDED_BY(reload_mu_);   // null: not reloaded
  std::unique_ptr<WatchedFile> crl_file_ ABSL_GUARDED_BY(reload_mu_);  // null without CRLs
  mutable absl::Mutex mu_;
  std::shared_ptr<const Trust> trust_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, Cached> cache_ ABSL_GUARDED_BY(mu_);  // leaf PEM -> identity
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RPC_CLIENT_CERT_H_
