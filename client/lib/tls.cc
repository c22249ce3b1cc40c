#include "client/lib/tls.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <grpcpp/security/credentials.h>

namespace turnstile::client {

namespace {

absl::StatusOr<std::string> ReadPem(const std::string& field, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(field + ": cannot read " + path);
  std::stringstream pem;
  pem << in.rdbuf();
  if (pem.str().empty()) return absl::InvalidArgumentError(field + ": " + path + " is empty");
  return pem.str();
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

TlsFiles TlsFiles::FromEnv() {
  return TlsFiles{Env("TURNSTILE_TLS_CA_FILE"), Env("TURNSTILE_TLS_CERT_FILE"),
                  Env("TURNSTILE_TLS_KEY_FILE")};
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files) {
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError("tls_cert_file and tls_key_file go together");
  }
  if (files.ca_file.empty()) {
    if (!files.cert_file.empty()) {
      return absl::InvalidArgumentError(
          "tls_cert_file needs tls_ca_file (a client certificate is only sent over TLS)");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  auto ca = ReadPem("tls_ca_file", files.ca_file);
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *ca;
  if (!files.cert_file.empty()) {
    auto cert = ReadPem("tls_cert_file", files.cert_file);
    if (!cert.ok()) return cert.status();
    auto key = ReadPem("tls_key_file", files.key_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace turnstile::client
