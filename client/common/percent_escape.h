// %XX escapes with uppercase hex, shared by lock-name segments
// (client/common/lock_name.cc) and contender and lease names
// (server/recipe/lock_name.cc), so both spell a byte the same, one way only.
#ifndef TURNSTILE_CLIENT_COMMON_PERCENT_ESCAPE_H_
#define TURNSTILE_CLIENT_COMMON_PERCENT_ESCAPE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace turnstile {

// Value of an uppercase hex digit, or -1. Lowercase is rejected on purpose:
// accepting it would give one byte two spellings and break canonicity.
inline int UpperHexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

inline void AppendEscaped(unsigned char b, std::string* out) {
  constexpr char kHexDigits[] = "0123456789ABCDEF";
  out->push_back('%');
  out->push_back(kHexDigits[b >> 4]);
  out->push_back(kHexDigits[b & 0xF]);
}

// Reads "%XX" at s[i]; on success stores the byte and returns true.
// REQUIRES: i < s.size()
inline bool ReadEscape(absl::string_view s, size_t i, unsigned char* b) {
  if (s.size() - i < 3) return false;
  const int hi = UpperHexValue(s[i + 1]);
  const int lo = UpperHexValue(s[i + 2]);
  if (hi < 0 || lo < 0) return false;
  *b = static_cast<unsigned char>(hi * 16 + lo);
  return true;
}

}  // namespace turnstile

#endif  // TURNSTILE_CLIENT_COMMON_PERCENT_ESCAPE_H_
