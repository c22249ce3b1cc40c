// Durations written the way flags take them: "1h", "30s", "1m30s",
// "1s500ms", "250ms", "0s" (ParseDuration in flags.h reads them back).
// Header-only, so that the C++ client library, which links no other
// library of the repository, writes its messages the same way as the
// server and the CLI. Thread-safe (a pure function).
#ifndef TURNSTILE_CLIENT_COMMON_DURATION_TEXT_H_
#define TURNSTILE_CLIENT_COMMON_DURATION_TEXT_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace turnstile {

// ParseDuration(FormatDuration(d)) == d for d >= 0; a negative d is
// written with a leading '-' ("-1s500ms"), for messages that refuse it.
inline std::string FormatDuration(std::chrono::milliseconds d) {
  int64_t ms = d.count();
  if (ms == 0) return "0s";
  std::string out;
  if (ms < 0) {
    out = "-";
    ms = -ms;
  }
  const int64_t h = ms / 3600000, m = ms / 60000 % 60, s = ms / 1000 % 60, rest = ms % 1000;
  if (h > 0) absl::StrAppend(&out, h, "h");
  if (m > 0) absl::StrAppend(&out, m, "m");
  if (s > 0) absl::StrAppend(&out, s, "s");
  if (rest > 0) absl::StrAppend(&out, rest, "ms");
  return out;
}

}  // namespace turnstile

#endif  // TURNSTILE_CLIENT_COMMON_DURATION_TEXT_H_
