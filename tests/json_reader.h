// A tiny JSON reader for tests and test tools (BENCH_JSON lines, the
// conformance runner's commands): objects, arrays, strings (\u escapes
// read as '?'), numbers, true/false/null; depth at most 16. Test-only.
#ifndef TURNSTILE_TESTS_JSON_READER_H_
#define TURNSTILE_TESTS_JSON_READER_H_

#include <cctype>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace turnstile::testing {

struct JsonValue {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool b = false;
  double number = 0;
  std::string str;
  std::vector<JsonValue> array;
  std::map<std::string, JsonValue> object;

  bool Has(const std::string& key) const { return kind == kObject && object.count(key) > 0; }
  const JsonValue& operator[](const std::string& key) const {
    static const JsonValue kMissing;
    auto it = object.find(key);
    return it == object.end() ? kMissing : it->second;
  }
  bool IsNumber() const { return kind == kNumber; }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}
  // False (with error()) on anything malformed or trailing.
  bool Parse(JsonValue* out) {
    if (!Value(out, 0)) return false;
    Ws();
    if (i_ != s_.size()) return Fail("trailing characters");
    return true;
  }
  const std::string& error() const { return error_; }

 private:
  bool Fail(const std::string& why) {
    if (error_.empty()) error_ = why + " at offset " + std::to_string(i_);
    return false;
  }
  void Ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool Lit(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(i_, n, word) != 0) return Fail(std::string("expected ") + word);
    i_ += n;
    return true;
  }
  bool String(std::string* out) {
    if (i_ >= s_.size() || s_[i_] != '"') return Fail("expected string");
    ++i_;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\') {
        if (i_ >= s_.size()) return Fail("bad escape");
        char e = s_[i_++];
        switch (e) {
          case 'n': out->push_back('\n'); break;
          case 't': out->push_back('\t'); break;
          case 'r': out->push_back('\r'); break;
          case 'u':
            if (i_ + 4 > s_.size()) return Fail("bad \\u escape");
            out->push_back('?');
            i_ += 4;
            break;
          default: out->push_back(e);
        }
      } else {
        out->push_back(c);
      }
    }
    if (i_ >= s_.size()) return Fail("unterminated string");
    ++i_;
    return true;
  }
  bool Value(JsonValue* v, int depth) {
    if (depth > 16) return Fail("too deep");
    Ws();
    if (i_ >= s_.size()) return Fail("unexpected end");
    char c = s_[i_];
    if (c == '{') {
      v->kind = JsonValue::kObject;
      ++i_;
      Ws();
      if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
      for (;;) {
        Ws();
        std::string key;
        if (!String(&key)) return false;
        Ws();
        if (i_ >= s_.size() || s_[i_] != ':') return Fail("expected ':'");
        ++i_;
        if (v->object.count(key)) return Fail("duplicate key " + key);
        if (!Value(&v->object[key], depth + 1)) return false;
        Ws();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
        return Fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v->kind = JsonValue::kArray;
      ++i_;
      Ws();
      if (i_ < s_.size() && s_[i_] == ']') return ++i_, true;
      for (;;) {
        v->array.emplace_back();
        if (!Value(&v->array.back(), depth + 1)) return false;
        Ws();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == ']') return ++i_, true;
        return Fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v->kind = JsonValue::kString;
      return String(&v->str);
    }
    if (c == 't') return v->kind = JsonValue::kBool, v->b = true, Lit("true");
    if (c == 'f') return v->kind = JsonValue::kBool, Lit("false");
    if (c == 'n') return v->kind = JsonValue::kNull, Lit("null");
    const char* begin = s_.c_str() + i_;
    char* end = nullptr;
    v->number = std::strtod(begin, &end);
    if (end == begin) return Fail("expected a value");
    v->kind = JsonValue::kNumber;
    i_ += static_cast<size_t>(end - begin);
    return true;
  }

  const std::string& s_;
  size_t i_ = 0;
  std::string error_;
};

}  // namespace turnstile::testing

#endif  // TURNSTILE_TESTS_JSON_READER_H_
