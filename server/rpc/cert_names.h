// How a certificate is named to an operator: the identity it claims, its
// subject and issuer, its serial as `openssl x509 -serial` prints it, and
// dates in UTC (RFC 3339). Used by the client certificate verifier (a
// refused certificate's audit line) and the serving certificate's reload
// log. Pure functions over OpenSSL's X509; thread-safe.
#ifndef TURNSTILE_SERVER_RPC_CERT_NAMES_H_
#define TURNSTILE_SERVER_RPC_CERT_NAMES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <openssl/x509.h>

#include "absl/status/status.h"

namespace turnstile {

// A time as RFC 3339 in UTC to the second: "2027-01-31T12:00:00Z".
std::string UtcTime(int64_t unix_seconds);

// What names one certificate.
struct CertNames {
  std::string identity;  // first URI SAN, else first DNS SAN, else subject CN; "" if none
  std::string subject;   // RFC 2253 ("CN=api,O=acme"); "" if empty
  std::string issuer;    // RFC 2253
  std::string serial;    // uppercase hex, an even number of digits ("05", "3A0F")
  int64_t not_after = 0;  // Unix seconds; 0 if unreadable
};
CertNames NamesOf(X509* x);

// One line for people: `subject "CN=api", serial 05, issuer "CN=ca",
// valid until 2027-01-31T12:00:00Z`.
std::string DescribeCertificate(const CertNames& n);

// A refusal of a client certificate carries the refused certificate's
// names (an absl::Status payload), so that whoever logs the refusal can
// name the certificate in fields of their own.
void AttachRefusedCertificate(const CertNames& n, absl::Status* refusal);
std::optional<CertNames> RefusedCertificateOf(const absl::Status& refusal);
// The audit line's fields for the certificate a refusal carries (none if
// it carries none): cert_identity (the identity it claims, NOT verified),
// cert_subject, cert_serial, cert_issuer, cert_not_after (UTC).
std::vector<std::pair<std::string, std::string>> RefusedCertificateAuditFields(
    const absl::Status& refusal);

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RPC_CERT_NAMES_H_
