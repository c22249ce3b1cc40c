#include "server/rpc/cert_names.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/x509v3.h>

#include <ctime>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace turnstile {

namespace {

// The payload's key: a URL by absl::Status's convention.
constexpr char kRefusedCertificate[] = "type.turnstile.dev/refused-certificate";

std::string Rfc2253(const X509_NAME* name) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return "";
  // RFC 2253 order and escaping, UTF-8 kept as UTF-8 (no \XX escapes).
  X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data != nullptr && n > 0 ? data : "", n > 0 ? static_cast<size_t>(n) : 0);
  BIO_free(bio);
  return out;
}

std::string SerialHex(const X509* x) {
  BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), nullptr);
  if (bn == nullptr) return "";
  std::string out;
  if (BN_is_zero(bn)) {
    out = "00";  // BN_bn2hex says "0"; openssl x509 -serial says "00"
  } else if (char* hex = BN_bn2hex(bn)) {
    out = hex;
    OPENSSL_free(hex);
  }
  BN_free(bn);
  return out;
}

std::string IdentityOf(X509* x) {
  std::string uri, dns;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
  if (names != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
      if (n->type == GEN_URI && uri.empty()) {
        uri.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.uniformResourceIdentifier)),
                   ASN1_STRING_length(n->d.uniformResourceIdentifier));
      } else if (n->type == GEN_DNS && dns.empty()) {
        dns.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                   ASN1_STRING_length(n->d.dNSName));
      }
    }
    GENERAL_NAMES_free(names);
  }
  if (!uri.empty()) return uri;
  if (!dns.empty()) return dns;
  X509_NAME* subject = X509_get_subject_name(x);
  int idx = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (idx < 0) return "";
  ASN1_STRING* cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, idx));
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(cn)), ASN1_STRING_length(cn));
}

// Length-prefixed fields ("<n>:<bytes>"): a name may hold any byte.
void Put(std::string* out, const std::string& field) { absl::StrAppend(out, field.size(), ":", field); }
bool Take(absl::string_view* in, std::string* field) {
  const size_t colon = in->find(':');
  size_t n = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(in->substr(0, colon), &n) ||
      in->size() - colon - 1 < n) {
    return false;
  }
  *field = std::string(in->substr(colon + 1, n));
  in->remove_prefix(colon + 1 + n);
  return true;
}

}  // namespace

std::string UtcTime(int64_t unix_seconds) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", absl::FromUnixSeconds(unix_seconds),
                          absl::UTCTimeZone());
}

CertNames NamesOf(X509* x) {
  CertNames n;
  n.identity = IdentityOf(x);
  n.subject = Rfc2253(X509_get_subject_name(x));
  n.issuer = Rfc2253(X509_get_issuer_name(x));
  n.serial = SerialHex(x);
  struct tm tm {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1) n.not_after = timegm(&tm);
  return n;
}

std::string DescribeCertificate(const CertNames& n) {
  return absl::StrCat("subject \"", n.subject, "\", serial ", n.serial, ", issuer \"", n.issuer,
                      "\"", n.not_after != 0 ? absl::StrCat(", valid until ", UtcTime(n.not_after)) : "");
}

void AttachRefusedCertificate(const CertNames& n, absl::Status* refusal) {
  std::string v;
  for (const std::string* f : {&n.identity, &n.subject, &n.issuer, &n.serial}) Put(&v, *f);
  Put(&v, absl::StrCat(n.not_after));
  refusal->SetPayload(kRefusedCertificate, absl::Cord(v));
}

std::optional<CertNames> RefusedCertificateOf(const absl::Status& refusal) {
  auto payload = refusal.GetPayload(kRefusedCertificate);
  if (!payload) return std::nullopt;
  const std::string v(*payload);
  absl::string_view in(v);
  CertNames n;
  std::string not_after;
  for (std::string* f : {&n.identity, &n.subject, &n.issuer, &n.serial, &not_after}) {
    if (!Take(&in, f)) return std::nullopt;
  }
  if (!absl::SimpleAtoi(not_after, &n.not_after)) return std::nullopt;
  return n;
}

std::vector<std::pair<std::string, std::string>> RefusedCertificateAuditFields(
    const absl::Status& refusal) {
  std::optional<CertNames> n = RefusedCertificateOf(refusal);
  if (!n) return {};
  return {{"cert_identity", n->identity},
          {"cert_subject", n->subject},
          {"cert_serial", n->serial},
          {"cert_issuer", n->issuer},
          {"cert_not_after", n->not_after != 0 ? UtcTime(n->not_after) : ""}};
}

}  // namespace turnstile
