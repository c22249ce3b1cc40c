#include "server/recipe/lock_name.h"

#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/common/percent_escape.h"

namespace turnstile {

namespace {

// A printable rendering of untrusted input for error messages.
std::string Quote(absl::string_view s) {
  constexpr size_t kMaxQuoted = 64;
  if (s.size() > kMaxQuoted) {
    return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kMaxQuoted)),
                        "\"...");
  }
  return absl::StrCat("\"", absl::CHexEscape(s), "\"");
}

// ---------------------------------------------------------------------------
// Contender info

// Bytes that EncodeContenderInfo writes as %XX: the escape character, the
// key/value separator, and everything that is not printable ASCII (which
// includes '\n', the line separator).
bool InfoNeedsEscape(unsigned char b) {
  return b == '%' || b == '=' || b < 0x20 || b > 0x7E;
}

void AppendInfoEscaped(absl::string_view s, std::string* out) {
  for (char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (InfoNeedsEscape(b)) {
      AppendEscaped(b, out);
    } else {
      out->push_back(c);
    }
  }
}

absl::Status InfoError(size_t line_no, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("contender info: line ", line_no, ": ", what));
}

// Strict inverse of AppendInfoEscaped.
absl::Status InfoUnescape(absl::string_view s, size_t line_no,
                          std::string* out) {
  out->clear();
  out->reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b == '%') {
      unsigned char decoded;
      if (!ReadEscape(s, i, &decoded)) {
        return InfoError(line_no, "bad %XX escape (uppercase hex required)");
      }
      if (!InfoNeedsEscape(decoded)) {
        return InfoError(line_no,
                         absl::StrCat("needless escape ", s.substr(i, 3)));
      }
      out->push_back(static_cast<char>(decoded));
      i += 2;
    } else if (InfoNeedsEscape(b)) {
      return InfoError(line_no, absl::StrFormat("unescaped byte 0x%02X", b));
    } else {
      out->push_back(static_cast<char>(b));
    }
  }
  return absl::OkStatus();
}

// Canonical decimal only ("-0", "+1", "007" and " 1" are rejected), so that
// re-encoding reproduces the input.
bool ParseCanonicalInt64(absl::string_view s, int64_t* v) {
  return absl::SimpleAtoi(s, v) && absl::StrCat(*v) == s;
}

constexpr absl::string_view kInfoHeader = "turnstile-contender v1";
constexpr absl::string_view kInfoHeaderPrefix = "turnstile-contender ";
constexpr absl::string_view kMetaPrefix = "meta.";

}  // namespace


std::string ContenderNodePrefix(ContenderKind kind, absl::string_view uid,
                                int32_t max_holders) {
  switch (kind) {
    case ContenderKind::kShared: return absl::StrCat("s-", uid, "-");
    case ContenderKind::kSemaphore: return absl::StrCat("n", max_holders, "-", uid, "-");
    case ContenderKind::kExclusive: break;
  }
  return absl::StrCat("x-", uid, "-");
}

std::optional<ContenderName> ParseContenderName(absl::string_view node) {
  constexpr size_t kUidLen = kContenderUidLen;
  const absl::string_view full = node;
  ContenderName result;
  // The kind, and for a semaphore its N: strictly what ContenderNodePrefix writes.
  size_t kind_len = 1;
  switch (node.empty() ? '\0' : node[0]) {
    case 'x': result.kind = ContenderKind::kExclusive; break;
    case 's': result.kind = ContenderKind::kShared; break;
    case 'n': {
      result.kind = ContenderKind::kSemaphore;
      while (kind_len < node.size() && kind_len <= 7 && absl::ascii_isdigit(node[kind_len])) {
        ++kind_len;
      }
      const absl::string_view digits = node.substr(1, kind_len - 1);
      int32_t n = 0;
      if (digits.empty() || digits[0] == '0' || digits.size() > 6 ||
          !absl::SimpleAtoi(digits, &n) || n > kMaxSemaphoreHoldersEver) {
        return std::nullopt;
      }
      result.max_holders = n;
      break;
    }
    default: return std::nullopt;
  }
  node.remove_prefix(kind_len - 1);  // from here on, as "x-<uid>-<seq>"
  const size_t kSeqStart = 2 + kUidLen + 1;  // "x-" uid "-"
  // "%010d" of an int32 is 10 chars for 0..2147483647 and -999999999..-1
  // (zero-padded after the sign), 11 chars for -2147483648..-1000000000.
  if (node.size() != kSeqStart + 10 && node.size() != kSeqStart + 11) {
    return std::nullopt;
  }
  if (node[1] != '-' || node[kSeqStart - 1] != '-') return std::nullopt;
  const absl::string_view uid = node.substr(2, kUidLen);
  for (char c : uid) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return std::nullopt;
  }
  const absl::string_view seq = node.substr(kSeqStart);
  for (size_t i = 0; i < seq.size(); ++i) {
    if (!absl::ascii_isdigit(seq[i]) && !(i == 0 && seq[i] == '-')) {
      return std::nullopt;
    }
  }
  // SimpleAtoi rejects values outside int32; formatting back rejects every
  // spelling ZooKeeper would not produce ("-000000000", 11 digits, ...).
  int32_t value;
  if (!absl::SimpleAtoi(seq, &value) ||
      absl::StrFormat("%010d", value) != seq) {
    return std::nullopt;
  }
  result.uid = std::string(uid);
  result.sequence = value;
  result.node = std::string(full);
  return result;
}

std::string NewContenderUid() {
  // Drawn straight from std::random_device (the kernel CSPRNG or RDRAND in
  // libstdc++) rather than from a seeded PRNG: one uid per Acquire is cheap
  // next to a ZooKeeper round trip, and there is no PRNG state that a fork()
  // could duplicate into two processes issuing the same uids.
  thread_local std::random_device rd;
  uint64_t v = 0;
  for (int bits = 0; bits < 64; bits += 32) {
    v = (v << 32) | static_cast<uint32_t>(rd());
  }
  return absl::StrFormat("%016x", v);
}

std::string FormatLeaseId(absl::string_view lock_segment,
                          absl::string_view contender_node) {
  return absl::StrCat(lock_segment, "/", contender_node);
}

absl::StatusOr<LeaseId> ParseLeaseId(absl::string_view lease_id) {
  if (lease_id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lease_id: must not be empty (1 to ", kMaxLeaseIdBytes, " bytes)"));
  }
  if (lease_id.size() > kMaxLeaseIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease_id: ", lease_id.size(),
                     " bytes exceeds the limit of ", kMaxLeaseIdBytes,
                     " bytes"));
  }
  // Encoded segments never contain '/', so the first one is the separator.
  const size_t slash = lease_id.find('/');
  if (slash == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease_id: ", Quote(lease_id),
                     " is not of the form <lock-segment>/<contender-node>"));
  }
  LeaseId result;
  result.lock_segment = std::string(lease_id.substr(0, slash));
  absl::StatusOr<std::string> name = DecodeLockName(result.lock_segment);
  if (!name.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lease_id: bad lock segment: ", name.status().message()));
  }
  result.lock_name = *std::move(name);
  const absl::string_view node = lease_id.substr(slash + 1);
  std::optional<ContenderName> contender = ParseContenderName(node);
  if (!contender.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lease_id: ", Quote(node), " is not a contender node name"));
  }
  result.contender = *std::move(contender);
  return result;
}

std::string EncodeContenderInfo(const ContenderInfo& info) {
  std::string out = absl::StrCat(kInfoHeader, "\n");
  out.append("owner=");
  AppendInfoEscaped(info.owner, &out);
  out.append("\nreplica_id=");
  AppendInfoEscaped(info.replica_id, &out);
  absl::StrAppend(&out, "\nstarted_unix_ms=", info.started_unix_ms,
                  "\nttl_ms=", info.ttl_ms, "\n");
  if (info.lock_delay_ms > 0) absl::StrAppend(&out, "lock_delay_ms=", info.lock_delay_ms, "\n");
  if (info.renewals > 0) absl::StrAppend(&out, "renewals=", info.renewals, "\n");
  if (info.granted_unix_ms > 0) {
    absl::StrAppend(&out, "granted_unix_ms=", info.granted_unix_ms, "\n");
  }
  if (info.proclaims > 0) absl::StrAppend(&out, "proclaims=", info.proclaims, "\n");
  if (info.revoke_id > 0) {
    absl::StrAppend(&out, "revoke_id=", info.revoke_id, "\nrevoke_by=");
    AppendInfoEscaped(info.revoke_by, &out);
    out.append("\nrevoke_reason=");
    AppendInfoEscaped(info.revoke_reason, &out);
    out.push_back('\n');
  }
  if (!info.identity.empty()) {
    out.append("identity=");
    AppendInfoEscaped(info.identity, &out);
    out.push_back('\n');
  }
  for (const auto& [key, value] : info.metadata) {
    out.append(kMetaPrefix.data(), kMetaPrefix.size());
    AppendInfoEscaped(key, &out);
    out.push_back('=');
    AppendInfoEscaped(value, &out);
    out.push_back('\n');
  }
  return out;
}

absl::StatusOr<ContenderInfo> DecodeContenderInfo(absl::string_view data) {
  ContenderInfo info;
  bool have_owner = false, have_replica = false, have_started = false,
       have_ttl = false;
  size_t line_no = 0;
  while (!data.empty()) {
    ++line_no;
    const size_t nl = data.find('\n');
    if (nl == absl::string_view::npos) {
      return InfoError(line_no, "missing final newline");
    }
    const absl::string_view line = data.substr(0, nl);
    data.remove_prefix(nl + 1);

    if (line_no == 1) {
      if (line == kInfoHeader) continue;
      if (absl::StartsWith(line, kInfoHeaderPrefix)) {
        return InfoError(line_no, absl::StrCat("unsupported version ",
                                               Quote(line.substr(
                                                   kInfoHeaderPrefix.size()))));
      }
      return InfoError(line_no, absl::StrCat("expected header \"", kInfoHeader,
                                             "\", got ", Quote(line)));
    }

    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return InfoError(line_no, "expected key=value");
    }
    const absl::string_view key = line.substr(0, eq);
    const absl::string_view raw_value = line.substr(eq + 1);

    if (key == "owner" || key == "replica_id") {
      bool& seen = key == "owner" ? have_owner : have_replica;
      if (seen) return InfoError(line_no, absl::StrCat("duplicate ", key));
      seen = true;
      std::string& field = key == "owner" ? info.owner : info.replica_id;
      if (absl::Status s = InfoUnescape(raw_value, line_no, &field); !s.ok()) {
        return s;
      }
    } else if (key == "renewals" || key == "revoke_id" || key == "lock_delay_ms" ||
               key == "granted_unix_ms" || key == "proclaims") {
      int64_t& field = key == "renewals"          ? info.renewals
                       : key == "revoke_id"       ? info.revoke_id
                       : key == "proclaims"       ? info.proclaims
                       : key == "granted_unix_ms" ? info.granted_unix_ms
                                                  : info.lock_delay_ms;
      if (!ParseCanonicalInt64(raw_value, &field) || field < 0) {
        return InfoError(line_no, absl::StrCat(key, ": not a canonical int64 >= 0: ",
                                               Quote(raw_value)));
      }
    } else if (key == "revoke_by" || key == "revoke_reason" || key == "identity") {
      std::string& field = key == "revoke_by"       ? info.revoke_by
                           : key == "revoke_reason" ? info.revoke_reason
                                                    : info.identity;
      if (absl::Status s = InfoUnescape(raw_value, line_no, &field); !s.ok()) return s;
    } else if (key == "started_unix_ms" || key == "ttl_ms") {
      bool& seen = key == "ttl_ms" ? have_ttl : have_started;
      if (seen) return InfoError(line_no, absl::StrCat("duplicate ", key));
      seen = true;
      int64_t& field = key == "ttl_ms" ? info.ttl_ms : info.started_unix_ms;
      if (!ParseCanonicalInt64(raw_value, &field)) {
        return InfoError(line_no, absl::StrCat(key, ": not a canonical int64: ",
                                               Quote(raw_value)));
      }
    } else if (absl::StartsWith(key, kMetaPrefix)) {
      std::string meta_key, meta_value;
      if (absl::Status s = InfoUnescape(key.substr(kMetaPrefix.size()),
                                        line_no, &meta_key);
          !s.ok()) {
        return s;
      }
      if (absl::Status s = InfoUnescape(raw_value, line_no, &meta_value);
          !s.ok()) {
        return s;
      }
      if (!info.metadata.emplace(std::move(meta_key), std::move(meta_value))
               .second) {
        return InfoError(line_no, "duplicate metadata key");
      }
    }
    // Any other key: written by a newer version; ignored on purpose.
  }
  if (line_no == 0) {
    return absl::InvalidArgumentError("contender info: empty");
  }
  if (!have_owner || !have_replica || !have_started || !have_ttl) {
    return absl::InvalidArgumentError(
        "contender info: missing one of owner, replica_id, started_unix_ms, "
        "ttl_ms");
  }
  // A requester or reason without a request means nothing (the encoder
  // writes them only with revoke_id > 0): dropped, so that decoding and
  // re-encoding agree (found by tests/fuzz/fuzz_lease_id).
  if (info.revoke_id == 0) {
    info.revoke_by.clear();
    info.revoke_reason.clear();
  }
  return info;
}

std::string EncodeLockMark(const std::string& released, int64_t delay_until_unix_ms) {
  std::string out = "turnstile-lock v1\n";
  if (!released.empty()) absl::StrAppend(&out, "released=", released, "\n");
  if (delay_until_unix_ms > 0) absl::StrAppend(&out, "delay_until_unix_ms=", delay_until_unix_ms, "\n");
  return out;
}

LockMark DecodeLockMark(absl::string_view data) {
  LockMark m;
  if (!absl::StartsWith(data, "turnstile-lock v1\n")) return m;
  for (absl::string_view line : absl::StrSplit(data, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "released=")) {
      m.released = std::string(line.substr(9));
    } else if (absl::StartsWith(line, "delay_until_unix_ms=")) {
      int64_t v = 0;
      if (absl::SimpleAtoi(line.substr(20), &v) && v > 0) m.delay_until_unix_ms = v;
    }
  }
  return m;
}

}  // namespace turnstile
