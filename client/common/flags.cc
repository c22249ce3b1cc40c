#include "client/common/flags.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace turnstile {

absl::StatusOr<std::chrono::milliseconds> ParseDuration(const std::string& text) {
  auto bad = [&text] {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad duration \"", text, "\" (use e.g. 500ms, 10s, 1m30s, 2m, 1h; a bare number is seconds)"));
  };
  if (text.empty()) return bad();
  // A bare number (the old form) is seconds.
  double v = 0;
  if (absl::SimpleAtod(text, &v) && text.find_first_of("eE") == std::string::npos) {
    // NaN passes every comparison: refused first (found by tests/fuzz/fuzz_flags;
    // converting it to an integer is undefined behaviour).
    if (!std::isfinite(v) || v < 0 || v > 1e9) return bad();
    return std::chrono::milliseconds(static_cast<int64_t>(v * 1000));
  }
  // One or more <number><unit>, unit h, m, s or ms ("1h30m", "1m30s",
  // "1s500ms", "2.5s", "3600000ms").
  double total = 0;
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    while (i < text.size() && (absl::ascii_isdigit(static_cast<unsigned char>(text[i])) ||
                               text[i] == '.')) {
      ++i;
    }
    if (i == start || i == text.size()) return bad();
    double n = 0;
    if (!absl::SimpleAtod(text.substr(start, i - start), &n) || !std::isfinite(n) || n < 0) {
      return bad();
    }
    double unit = 0;
    if (text.compare(i, 2, "ms") == 0) {
      unit = 1;
      i += 2;
    } else if (text[i] == 'h') {
      unit = 3600000;
      ++i;
    } else if (text[i] == 'm') {
      unit = 60000;
      ++i;
    } else if (text[i] == 's') {
      unit = 1000;
      ++i;
    } else {
      return bad();
    }
    total += n * unit;
    if (!(total <= 1e12)) return bad();
  }
  return std::chrono::milliseconds(static_cast<int64_t>(total));
}

std::string FlagSet::EnvName(const std::string& flag) {
  return "TURNSTILE_" + absl::AsciiStrToUpper(absl::StrReplaceAll(flag, {{"-", "_"}}));
}

void FlagSet::String(const std::string& name, std::string* target,
                     const std::string& help) {
  flags_.push_back({name, help, *target, [target](const std::string& v) {
                      *target = v;
                      return absl::OkStatus();
                    }});
}

void FlagSet::Int(const std::string& name, int64_t* target, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*target),
                    [target, name](const std::string& v) {
                      if (!absl::SimpleAtoi(v, target)) {
                        return absl::InvalidArgumentError(
                            absl::StrCat("--", name, ": not an integer: \"", v, "\""));
                      }
                      return absl::OkStatus();
                    }});
}

void FlagSet::Duration(const std::string& name, std::chrono::milliseconds* target,
                       const std::string& help) {
  flags_.push_back({name, help, FormatDuration(*target),
                    [target, name](const std::string& v) {
                      auto d = ParseDuration(v);
                      if (!d.ok()) {
                        return absl::InvalidArgumentError(
                            absl::StrCat("--", name, ": ", d.status().message()));
                      }
                      *target = *d;
                      return absl::OkStatus();
                    }});
}

void FlagSet::Bool(const std::string& name, bool* target, const std::string& help) {
  Flag f{name, help, *target ? "true" : "false",
         [target, name](const std::string& v) {
           if (v == "true" || v == "1") {
             *target = true;
           } else if (v == "false" || v == "0") {
             *target = false;
           } else {
             return absl::InvalidArgumentError(
                 absl::StrCat("--", name, ": \"", v, "\" is not true/false/1/0"));
           }
           return absl::OkStatus();
         }};
  f.is_switch = true;
  flags_.push_back(std::move(f));
}

void FlagSet::Custom(const std::string& name, const std::string& default_text,
                     const std::string& help,
                     std::function<absl::Status(const std::string&)> set) {
  flags_.push_back({name, help, default_text, std::move(set)});
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (auto& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

absl::StatusOr<std::vector<std::string>> FlagSet::Parse(int argc, char** argv,
                                                        bool* help_requested) {
  *help_requested = false;
  for (auto& f : flags_) {
    if (const char* env = std::getenv(EnvName(f.name).c_str())) {
      if (absl::Status s = f.set(env); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(EnvName(f.name), ": ", s.message()));
      }
    }
  }
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      *help_requested = true;
      continue;
    }
    if (arg == "--") {
      for (++i; i < argc; ++i) positional.push_back(argv[i]);
      break;
    }
    if (arg.rfind("--", 0) != 0) {
      positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* f = Find(name);
    if (f == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!has_value && f->is_switch) {
      value = "true";
    } else if (!has_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = argv[++i];
    }
    if (absl::Status s = f->set(value); !s.ok()) return s;
  }
  return positional;
}

std::string FlagSet::Usage() const {
  return absl::StrCat("Usage: ", program_, " [flags]\n\n", FlagList());
}

std::string FlagSet::FlagList() const {
  std::string out = "Flags (each also read from its environment variable; flags win):\n";
  for (const auto& f : flags_) {
    absl::StrAppend(&out, "  --", f.name, " (", EnvName(f.name), ", default \"",
                    f.default_text, "\")\n      ", f.help, "\n");
  }
  return out;
}

}  // namespace turnstile
