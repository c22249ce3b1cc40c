// turnstile-bench end to end: a quick run against an in-process replica on
// the shared ZooKeeper prints one parseable BENCH_JSON line per workload,
// with positive numbers, turnstile/floor ratios, and W4's herd-freedom
// (about one watch notification per handoff, for every queue length).
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tests/test_support.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

// --- a tiny JSON reader (enough for BENCH_JSON lines) ---------------------------

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

// --- checks -------------------------------------------------------------------------

// `obj[key]` is a finite number > 0 (or >= 0 with allow_zero).
void ExpectPositive(const JsonValue& obj, const std::string& where, const std::string& key,
                    bool allow_zero = false) {
  const JsonValue& v = obj[key];
  ASSERT_TRUE(v.IsNumber()) << where << "." << key << " is missing or not a number";
  EXPECT_TRUE(std::isfinite(v.number)) << where << "." << key;
  if (allow_zero) {
    EXPECT_GE(v.number, 0) << where << "." << key;
  } else {
    EXPECT_GT(v.number, 0) << where << "." << key;
  }
}

void ExpectCycleWorkload(const JsonValue& j, const std::string& w, const std::string& rate) {
  ASSERT_TRUE(j.Has("turnstile") && j.Has("floor") && j.Has("ratio")) << w;
  for (const char* side : {"turnstile", "floor"}) {
    const std::string where = w + "." + side;
    ExpectPositive(j[side], where, "cycles");
    ExpectPositive(j[side], where, rate);
    ExpectPositive(j[side], where, "cycle_p50_ms");
    ExpectPositive(j[side], where, "cycle_p99_ms");
    EXPECT_GE(j[side]["cycle_p99_ms"].number, j[side]["cycle_p50_ms"].number) << where;
    EXPECT_EQ(j[side]["errors"].number, 0) << where;
  }
  for (const std::string& key : {rate, std::string("cycle_p50_ms"), std::string("cycle_p99_ms")}) {
    ExpectPositive(j["ratio"], w + ".ratio", key);
  }
  // The ratio is turnstile/floor as printed.
  EXPECT_NEAR(j["ratio"][rate].number, j["turnstile"][rate].number / j["floor"][rate].number,
              1e-3 * j["ratio"][rate].number + 1e-9);
}

TEST(BenchTest, QuickRunReportsEveryWorkloadAgainstTheFloor) {
  ZkServer& zk = SharedZkServer();
  ASSERT_TRUE(zk.running());
  ReplicaConfig config = TestConfig(zk.ConnectString(), UniqueRoot("bench"));
  // W4 --quick queues 50 waiters behind one holder; leave room.
  config.max_contenders_per_lock = 200;
  std::unique_ptr<Replica> replica = StartReplica(config);
  ASSERT_TRUE(replica);

  const auto start = std::chrono::steady_clock::now();
  auto child = ChildProcess::Spawn({TURNSTILE_BENCH_PATH, "--quick", "--server",
                                    replica->address(), "--zk", zk.ConnectString()});
  ASSERT_TRUE(child);
  // Hard bound: the quick run takes ~15 s on a loaded 2-core machine.
  const auto deadline = start + std::chrono::seconds(120);
  std::string output;
  std::vector<std::string> json_lines;
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    std::optional<std::string> line = child->ReadLine(left);
    if (!line) break;  // EOF (or the deadline)
    output += *line + "\n";
    if (line->rfind("BENCH_JSON ", 0) == 0) json_lines.push_back(line->substr(11));
  }
  std::optional<int> code = child->Wait(milliseconds(10000));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(code.has_value()) << "turnstile-bench did not exit; output:\n" << output;
  ASSERT_EQ(*code, 0) << output;
  EXPECT_LT(seconds, 60) << "the quick run must stay well under a minute";

  std::map<std::string, JsonValue> by_workload;
  for (const std::string& text : json_lines) {
    JsonValue j;
    JsonParser parser(text);
    ASSERT_TRUE(parser.Parse(&j)) << parser.error() << ": " << text;
    ASSERT_EQ(j.kind, JsonValue::kObject) << text;
    ASSERT_EQ(j["workload"].kind, JsonValue::kString) << text;
    EXPECT_TRUE(by_workload.emplace(j["workload"].str, j).second)
        << "two lines for " << j["workload"].str;
    EXPECT_EQ(j["ok"].number, 1) << text;
    EXPECT_EQ(j["error"].kind, JsonValue::kNull) << text;
  }
  ASSERT_EQ(json_lines.size(), 4u) << output;
  for (const char* w : {"w1", "w2", "w3", "w4"}) {
    ASSERT_TRUE(by_workload.count(w)) << "no BENCH_JSON line for " << w << "\n" << output;
  }

  // W1 and W3: cycles per second and cycle latency, both sides.
  ExpectCycleWorkload(by_workload["w1"], "w1", "ops_per_s");
  EXPECT_EQ(by_workload["w1"]["clients"].number, 1);
  ExpectCycleWorkload(by_workload["w3"], "w3", "cycles_per_s");
  EXPECT_EQ(by_workload["w3"]["clients"].number, 32);
  EXPECT_EQ(by_workload["w3"]["locks"].number, 32);

  // W2: throughput and handoffs. RELEASED -> next ACQUIRED is clamped at 0
  // (the next holder may hear first), so it may be 0; the rest is positive.
  const JsonValue& w2 = by_workload["w2"];
  EXPECT_EQ(w2["clients"].number, 16);
  ExpectPositive(w2["turnstile"], "w2.turnstile", "cycles_per_s");
  ExpectPositive(w2["turnstile"], "w2.turnstile", "handoffs");
  ExpectPositive(w2["turnstile"], "w2.turnstile", "handoff_p50_ms", /*allow_zero=*/true);
  ExpectPositive(w2["turnstile"], "w2.turnstile", "handoff_p99_ms", /*allow_zero=*/true);
  ExpectPositive(w2["turnstile"], "w2.turnstile", "release_to_acquired_p50_ms");
  ExpectPositive(w2["floor"], "w2.floor", "cycles_per_s");
  ExpectPositive(w2["floor"], "w2.floor", "handoff_p50_ms");
  ExpectPositive(w2["floor"], "w2.floor", "handoff_p99_ms");
  ExpectPositive(w2["ratio"], "w2.ratio", "cycles_per_s");
  ExpectPositive(w2["ratio"], "w2.ratio", "handoff_p50_ms", /*allow_zero=*/true);
  ExpectPositive(w2["ratio"], "w2.ratio", "handoff_p99_ms", /*allow_zero=*/true);
  ExpectPositive(w2["ratio"], "w2.ratio", "release_to_acquired_p50_ms");

  // W4: every herd size, and herd-freedom as ZooKeeper counts it.
  const JsonValue& herd = by_workload["w4"]["herd"];
  ASSERT_EQ(herd.kind, JsonValue::kArray);
  std::set<int> sizes;
  for (const JsonValue& h : herd.array) {
    const int n = static_cast<int>(h["n"].number);
    sizes.insert(n);
    const std::string where = "w4[n=" + std::to_string(n) + "]";
    EXPECT_EQ(h["error"].kind, JsonValue::kNull) << where;
    const JsonValue& t = h["turnstile"];
    const JsonValue& f = h["floor"];
    EXPECT_EQ(t["handoffs"].number, n) << where;
    EXPECT_EQ(f["handoffs"].number, n) << where;
    ExpectPositive(t, where + ".turnstile", "handoff_p50_ms", /*allow_zero=*/true);
    ExpectPositive(t, where + ".turnstile", "release_to_acquired_p50_ms");
    ExpectPositive(t, where + ".turnstile", "handoffs_per_s");
    ExpectPositive(t, where + ".turnstile", "packets_per_handoff");
    ExpectPositive(f, where + ".floor", "handoff_p50_ms");
    ExpectPositive(f, where + ".floor", "handoffs_per_s");
    ExpectPositive(f, where + ".floor", "packets_per_handoff");
    for (const JsonValue* side : {&t, &f}) {
      const JsonValue& v = (*side)["watch_notifications_per_handoff"];
      ASSERT_TRUE(v.IsNumber()) << where;
      // One release wakes one waiter: no getChildren, no herd.
      EXPECT_GE(v.number, 0.5) << where;
      EXPECT_LE(v.number, 2.0) << where;
    }
    for (const char* key : {"handoff_p50_ms", "handoff_p99_ms", "release_to_acquired_p50_ms",
                            "handoffs_per_s", "packets_per_handoff",
                            "watch_notifications_per_handoff"}) {
      EXPECT_TRUE(h["ratio"][key].IsNumber()) << where << ".ratio." << key;
    }
    ExpectPositive(h["ratio"], where + ".ratio", "watch_notifications_per_handoff");
  }
  EXPECT_EQ(sizes, (std::set<int>{10, 50}));

  // The floor's znodes are gone.
  SyncZk sync(zk.ConnectString());
  auto top = sync.Children("/");
  ASSERT_TRUE(top.ok()) << top.status();
  for (const std::string& name : *top) {
    EXPECT_NE(name.rfind("turnstile-bench-floor-", 0), 0u) << "left behind: /" << name;
  }
}

}  // namespace
}  // namespace turnstile::testing
