// Channel credentials from PEM files, shared by the C++ client, the CLI and
// the tests: plaintext, server-authenticated TLS, or mutual TLS.
#ifndef TURNSTILE_CLIENT_LIB_TLS_H_
#define TURNSTILE_CLIENT_LIB_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ChannelCredentials;
}

namespace turnstile::client {

struct TlsFiles {
  std::string ca_file;    // set = TLS (the CAs the server's certificate must chain to)
  std::string cert_file;  // with key_file: a client certificate (mutual TLS)
  std::string key_file;
  bool empty() const { return ca_file.empty() && cert_file.empty() && key_file.empty(); }
  // TURNSTILE_TLS_CA_FILE, TURNSTILE_TLS_CERT_FILE, TURNSTILE_TLS_KEY_FILE.
  static TlsFiles FromEnv();
};

// INVALID_ARGUMENT naming the field for an unreadable or empty file, a
// certificate without its key (or the other way round), or a client
// certificate without ca_file.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files);

}  // namespace turnstile::client

#endif  // TURNSTILE_CLIENT_LIB_TLS_H_
