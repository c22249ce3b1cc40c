// JsonQuote: a std::string as a JSON string literal (quotes included), for
// the CLI's --output json and the benchmark's BENCH_JSON lines. Pure.
#ifndef TURNSTILE_CLIENT_JSON_QUOTE_H_
#define TURNSTILE_CLIENT_JSON_QUOTE_H_

#include <cstdio>
#include <string>

namespace turnstile {

inline std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace turnstile

#endif  // TURNSTILE_CLIENT_JSON_QUOTE_H_
