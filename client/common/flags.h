// Flags: a small command-line parser where every flag has a TURNSTILE_*
// environment variable; a flag on the command line wins over the variable,
// which wins over the default. Not thread-safe (parse once at start).
#ifndef TURNSTILE_CLIENT_COMMON_FLAGS_H_
#define TURNSTILE_CLIENT_COMMON_FLAGS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/common/duration_text.h"

namespace turnstile {

// "250ms", "10s", "2m", "1h", and sums of them: "1h30m", "1m30s",
// "1s500ms", "2.5s"; the old forms too ("3600000ms"; a bare number is
// seconds). At most 1e12 ms; INVALID_ARGUMENT otherwise.
absl::StatusOr<std::chrono::milliseconds> ParseDuration(const std::string& text);
// FormatDuration (duration_text.h) writes what this reads.

class FlagSet {
 public:
  explicit FlagSet(std::string program) : program_(std::move(program)) {}

  // `name` without dashes ("zk-root"); the variable is TURNSTILE_ZK_ROOT.
  void String(const std::string& name, std::string* target, const std::string& help);
  void Int(const std::string& name, int64_t* target, const std::string& help);
  void Duration(const std::string& name, std::chrono::milliseconds* target,
                const std::string& help);
  // A switch: "--name" alone sets it; "--name=false" / "=0" clears it (and
  // the environment variable takes true/false/1/0).
  void Bool(const std::string& name, bool* target, const std::string& help);
  // Any other kind of value: `set` checks and stores it (its error is the
  // usage error), once per occurrence, so a flag may repeat; `default_text`
  // is what Usage shows as the default.
  void Custom(const std::string& name, const std::string& default_text,
              const std::string& help, std::function<absl::Status(const std::string&)> set);

  // Applies environment variables, then argv (--name=value or --name value).
  // Returns the positional arguments. Sets *help_requested on --help/-h.
  absl::StatusOr<std::vector<std::string>> Parse(int argc, char** argv,
                                                 bool* help_requested);
  std::string Usage() const;
  // Usage without its heading: "Flags (...):" and one entry per flag,
  // for a program that writes its own heading around it.
  std::string FlagList() const;
  static std::string EnvName(const std::string& flag);

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    std::function<absl::Status(const std::string&)> set;
    bool is_switch = false;  // takes no separate value argument
  };
  Flag* Find(const std::string& name);

  std::string program_;
  std::vector<Flag> flags_;
};

}  // namespace turnstile

#endif  // TURNSTILE_CLIENT_COMMON_FLAGS_H_
