// ServingCertificate: the replica's TLS certificate and key, reloaded
// without a restart (issue 24: cert-manager renewals).
//
// The operator's --tls-cert-file and --tls-key-file are re-read when they
// change (four times a second; a Kubernetes Secret's symlink swap counts)
// and on SIGHUP. A new pair is checked first (both parse, the key matches
// the certificate) and only then put in force: a broken or mismatched pair
// is logged and the previous one stays. New connections use the new pair;
// open connections, streams and holds are not disturbed.
//
// How it reaches gRPC: gRPC's FileWatcherCertificateProvider watches ONE
// private file (0600, in a 0700 directory of our own) holding the checked
// key and certificate chain together, replaced by one rename, so gRPC can
// never read a key from one pair and a certificate from another. gRPC
// looks at it every second. Thread-safe.
#ifndef TURNSTILE_SERVER_RPC_SERVING_CERT_H_
#define TURNSTILE_SERVER_RPC_SERVING_CERT_H_

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/security/server_credentials.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/watched_file.h"

namespace turnstile {

// The notAfter (Unix seconds) of the first certificate of `cert_pem`, after
// checking that `key_pem` is its private key. INVALID_ARGUMENT saying what
// is wrong (never the key's bytes).
absl::StatusOr<int64_t> CheckCertificatePair(const std::string& cert_pem,
                                             const std::string& key_pem);

class ServingCertificate {
 public:
  // Loads and checks the pair (an error stops the replica from starting).
  // `request_client_cert`: ask for a client certificate without verifying
  // it in the handshake (mutual TLS; ClientCertVerifier judges it).
  static absl::StatusOr<std::unique_ptr<ServingCertificate>> Load(const std::string& cert_path,
                                                                  const std::string& key_path,
                                                                  bool request_client_cert);
  ~ServingCertificate();

  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }
  // Re-reads the files if they changed (force: even if their stat did
  // not); returns whether a new pair is now in force.
  bool Reload(bool force) ABSL_LOCKS_EXCLUDED(reload_mu_, mu_);
  // The serving certificate's notAfter, Unix seconds.
  int64_t not_after() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  ServingCertificate(std::string cert_path, std::string key_path)
      : cert_file_(std::move(cert_path)), key_file_(std::move(key_path)) {}
  // Writes the pair for gRPC (one rename).
  absl::Status Publish(const std::string& cert_pem, const std::string& key_pem);

  // Serializes Reload; taken before mu_.
  absl::Mutex reload_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  WatchedFile cert_file_ ABSL_GUARDED_BY(reload_mu_);
  WatchedFile key_file_ ABSL_GUARDED_BY(reload_mu_);
  // The latest bytes read from each file (in force, or waiting for the
  // other half of a rotation).
  std::string cert_latest_ ABSL_GUARDED_BY(reload_mu_);
  std::string key_latest_ ABSL_GUARDED_BY(reload_mu_);
  std::string dir_;        // our private directory
  std::string pair_path_;  // dir_/pair.pem
  std::shared_ptr<grpc::ServerCredentials> credentials_;
  mutable absl::Mutex mu_;
  int64_t not_after_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RPC_SERVING_CERT_H_
