// Command-line and duration parsing (turnstiled and turnstile read both from
// argv and TURNSTILE_* variables). The input is split at NUL bytes into argv.
// Invariants: a parsed duration is never negative, and FormatDuration of it
// parses back to the same duration.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "client/common/flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"fuzz"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  args.push_back(cur);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  turnstile::FlagSet flags("fuzz");
  std::string s;
  int64_t n = 0;
  std::chrono::milliseconds d{0};
  bool b = false;
  flags.String("listen", &s, "a string");
  flags.Int("max-streams", &n, "an int");
  flags.Duration("drain-timeout", &d, "a duration");
  flags.Bool("shared", &b, "a bool");
  bool help = false;
  auto rest = flags.Parse(static_cast<int>(args.size()), argv.data(), &help);
  if (rest.ok() && d.count() < 0) std::abort();
  (void)flags.Usage();
  auto parsed = turnstile::ParseDuration(cur);
  if (parsed.ok() && parsed->count() < 0) std::abort();
  // Whatever parses prints in a form that reads back as the same duration.
  if (parsed.ok()) {
    auto back = turnstile::ParseDuration(turnstile::FormatDuration(*parsed));
    if (!back.ok() || *back != *parsed) std::abort();
  }
  return 0;
}
