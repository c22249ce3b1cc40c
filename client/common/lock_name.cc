#include "client/common/lock_name.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/common/percent_escape.h"

namespace turnstile {

namespace {

// The bytes that may appear literally in an encoded segment. All are ASCII
// and none is '/', '%' or a control character, so the segment is always a
// single, valid ZooKeeper path component.
bool IsLockNameSafeByte(unsigned char b) {
  if (absl::ascii_isalnum(b)) return true;
  switch (b) {
    case '_': case '-': case '.': case ':': case '@':
    case '+': case '=': case ',': case '~':
      return true;
    default:
      return false;
  }
}

bool AllDots(absl::string_view s) {
  return !s.empty() && s.find_first_not_of('.') == absl::string_view::npos;
}

// Decodes one UTF-8 sequence at s[*i], advancing *i. Rejects overlong forms,
// surrogates and values above U+10FFFF, so only shortest-form Unicode
// scalar values are accepted.
bool NextCodePoint(absl::string_view s, size_t* i, uint32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(*i);
  size_t len;
  uint32_t value;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 < 0x80) {
    *cp = b0;
    *i += 1;
    return true;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    value = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    value = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    value = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // > U+10FFFF
  } else {
    return false;
  }
  if (s.size() - *i < len) return false;
  for (size_t k = 1; k < len; ++k) {
    const unsigned char b = byte(*i + k);
    const unsigned char min = (k == 1) ? lo : 0x80;
    const unsigned char max = (k == 1) ? hi : 0xBF;
    if (b < min || b > max) return false;
    value = (value << 6) | (b & 0x3F);
  }
  *cp = value;
  *i += len;
  return true;
}

}  // namespace

absl::Status ValidateLockName(absl::string_view name) {
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "name: must not be empty (1 to ", kMaxLockNameBytes, " bytes)"));
  }
  if (name.size() > kMaxLockNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: ", name.size(), " bytes exceeds the limit of ",
                     kMaxLockNameBytes, " bytes"));
  }
  size_t i = 0;
  while (i < name.size()) {
    const size_t start = i;
    uint32_t cp;
    if (!NextCodePoint(name, &i, &cp)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "name: not valid UTF-8 at byte offset ", start,
          " (must be valid UTF-8 of at most ", kMaxLockNameBytes, " bytes)"));
    }
    // C0 controls, DEL and C1 controls: invisible in logs and UIs, and NUL
    // is outright forbidden by ZooKeeper.
    if (cp <= 0x1F || (cp >= 0x7F && cp <= 0x9F)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "name: control character U+%04X at byte offset %d is not allowed "
          "(U+0000..U+001F and U+007F..U+009F are forbidden)",
          cp, start));
    }
  }
  return absl::OkStatus();
}

std::string EncodeLockName(absl::string_view name) {
  // ZooKeeper rejects path components "." and ".."; escaping every dot of an
  // all-dot name also keeps "..." and longer unambiguous without a special
  // case on the length.
  const bool escape_dots = AllDots(name);
  // ZooKeeper also rejects U+0000, U+0001..U+001F, U+007F..U+009F,
  // U+D800..U+F8FF and U+FFF0..U+FFFF in paths. None can occur here: every
  // byte outside printable ASCII (so every byte of a non-ASCII character) is
  // escaped, and the output is pure printable ASCII. The segment
  // "zookeeper" is reserved only directly under "/", and lock segments live
  // below our root, so it needs no escaping.
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    const auto b = static_cast<unsigned char>(c);
    if (IsLockNameSafeByte(b) && !(escape_dots && b == '.')) {
      out.push_back(c);
    } else {
      AppendEscaped(b, &out);
    }
  }
  return out;
}

absl::StatusOr<std::string> DecodeLockName(absl::string_view segment) {
  if (segment.empty()) {
    return absl::InvalidArgumentError("segment: must not be empty");
  }
  if (segment.size() > 3 * kMaxLockNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment: ", segment.size(), " bytes exceeds the limit of ",
        3 * kMaxLockNameBytes, " bytes"));
  }
  std::string name;
  name.reserve(segment.size());
  bool escaped_safe_byte = false;  // legal only for all-dot names
  for (size_t i = 0; i < segment.size(); ++i) {
    const auto b = static_cast<unsigned char>(segment[i]);
    if (b == '%') {
      unsigned char decoded;
      if (!ReadEscape(segment, i, &decoded)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "segment: bad %XX escape at byte offset ", i,
            " (uppercase hex required)"));
      }
      if (IsLockNameSafeByte(decoded)) {
        if (decoded != '.') {
          return absl::InvalidArgumentError(absl::StrCat(
              "segment: needless escape ", segment.substr(i, 3),
              " at byte offset ", i));
        }
        escaped_safe_byte = true;
      }
      name.push_back(static_cast<char>(decoded));
      i += 2;
    } else if (IsLockNameSafeByte(b)) {
      name.push_back(static_cast<char>(b));
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "segment: byte 0x%02X at byte offset %d must be escaped", b, i));
    }
  }
  // Dots are escaped either all (all-dot name) or none (any other name).
  if (AllDots(name)) {
    if (absl::StrContains(segment, '.')) {
      return absl::InvalidArgumentError(
          "segment: a name of only dots must have every dot escaped");
    }
  } else if (escaped_safe_byte) {
    return absl::InvalidArgumentError(
        "segment: needless escape %2E in a name that is not all dots");
  }
  if (absl::Status s = ValidateLockName(name); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment: decodes to an invalid lock name: ", s.message()));
  }
  return name;
}

}  // namespace turnstile
