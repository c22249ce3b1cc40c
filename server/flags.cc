#include "server/flags.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace turnstile {

absl::StatusOr<std::chrono::milliseconds> ParseDuration(const std::string& text) {
  struct Unit {
    const char* suffix;
    double ms;
  };
  static const Unit kUnits[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
  std::string num = text;
  double scale = 1000;
  for (const Unit& u : kUnits) {
    std::string suf = u.suffix;
    if (text.size() > suf.size() && text.compare(text.size() - suf.size(), suf.size(), suf) == 0) {
      std::string head = text.substr(0, text.size() - suf.size());
      // "2m" must not be read as "2" + "m" of "ms".
      if (suf == "m" || suf == "s") {
        if (!head.empty() && head.back() == 'm') continue;
      }
      num = head;
      scale = u.ms;
      break;
    }
  }
  double v;
  // NaN passes every comparison: refused first (found by tests/fuzz/fuzz_flags;
  // converting it to an integer is undefined behaviour).
  if (num.empty() || !absl::SimpleAtod(num, &v) || !std::isfinite(v) || v < 0 || v > 1e12) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad duration \"", text, "\" (use e.g. 500ms, 10s, 2m, 1h)"));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(v * scale));
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
  flags_.push_back({name, help, absl::StrCat(target->count(), "ms"),
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
  std::string out = absl::StrCat("Usage: ", program_, " [flags]\n\nFlags (each also read from its environment variable; flags win):\n");
  for (const auto& f : flags_) {
    absl::StrAppend(&out, "  --", f.name, " (", EnvName(f.name), ", default \"",
                    f.default_text, "\")\n      ", f.help, "\n");
  }
  return out;
}

}  // namespace turnstile
