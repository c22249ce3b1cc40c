#include "client/common/flags.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace turnstile {
namespace {

// Found by tests/fuzz/fuzz_flags: "nan" parsed as a number and was cast to
// an integer (undefined behaviour, a garbage duration).
TEST(ParseDuration, RefusesNanAndInfinity) {
  for (const char* bad : {"nan", "nanms", "-nan", "NaN", "nans", "inf", "infh", "-inf"}) {
    EXPECT_FALSE(ParseDuration(bad).ok()) << bad;
  }
}

TEST(ParseDuration, Units) {
  EXPECT_EQ(ParseDuration("250ms")->count(), 250);
  EXPECT_EQ(ParseDuration("10s")->count(), 10000);
  EXPECT_EQ(ParseDuration("2m")->count(), 120000);
  EXPECT_EQ(ParseDuration("1h")->count(), 3600000);
  EXPECT_EQ(ParseDuration("1.5s")->count(), 1500);
  EXPECT_EQ(ParseDuration("7")->count(), 7000);  // bare number = seconds
  EXPECT_FALSE(ParseDuration("").ok());
  EXPECT_FALSE(ParseDuration("-1s").ok());
  EXPECT_FALSE(ParseDuration("ten").ok());
  EXPECT_FALSE(ParseDuration("5parsecs").ok());
}

// Issue 24: durations print the way people write them, and read back.
TEST(FormatDuration, HumanFormsThatParseBack) {
  using std::chrono::milliseconds;
  EXPECT_EQ(FormatDuration(milliseconds(3600000)), "1h");
  EXPECT_EQ(FormatDuration(milliseconds(30000)), "30s");
  EXPECT_EQ(FormatDuration(milliseconds(90000)), "1m30s");
  EXPECT_EQ(FormatDuration(milliseconds(3630000)), "1h30s");
  EXPECT_EQ(FormatDuration(milliseconds(1500)), "1s500ms");
  EXPECT_EQ(FormatDuration(milliseconds(250)), "250ms");
  EXPECT_EQ(FormatDuration(milliseconds(0)), "0s");
  EXPECT_EQ(FormatDuration(milliseconds(86400000)), "24h");
  // Every form printed reads back as the same duration: all values up to
  // 2 h 1 min in steps that cross every unit, and large ones.
  for (int64_t ms = 0; ms <= 7260000; ms += 997) {
    auto back = ParseDuration(FormatDuration(milliseconds(ms)));
    ASSERT_TRUE(back.ok()) << FormatDuration(milliseconds(ms));
    ASSERT_EQ(back->count(), ms) << FormatDuration(milliseconds(ms));
  }
  for (int64_t ms : {int64_t{1}, int64_t{999}, int64_t{1000}, int64_t{59999}, int64_t{60000},
                     int64_t{3599999}, int64_t{999999999999}}) {
    EXPECT_EQ(ParseDuration(FormatDuration(milliseconds(ms)))->count(), ms) << ms;
  }
}

TEST(ParseDuration, SumsOfUnitsAndTheOldForms) {
  EXPECT_EQ(ParseDuration("1h30m")->count(), 5400000);
  EXPECT_EQ(ParseDuration("1m30s")->count(), 90000);
  EXPECT_EQ(ParseDuration("1s500ms")->count(), 1500);
  EXPECT_EQ(ParseDuration("2h0m1s")->count(), 7201000);
  EXPECT_EQ(ParseDuration("3600000ms")->count(), 3600000);  // what help printed before
  EXPECT_EQ(ParseDuration("0.25")->count(), 250);
  for (const char* bad : {"1h30", "h", "1x", "1m30q", "1..5s", "1 s", "s1", "1e3s", "1ms5"}) {
    EXPECT_FALSE(ParseDuration(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseDuration("99999999999999h").ok());  // beyond 1e12 ms
}

TEST(FlagSet, UsagePrintsDefaultsAsHumanDurations) {
  std::chrono::milliseconds wait(3600000), drain(10000);
  FlagSet f("t");
  f.Duration("max-wait-timeout", &wait, "");
  f.Duration("drain-timeout", &drain, "");
  const std::string u = f.Usage();
  EXPECT_NE(u.find("default \"1h\""), std::string::npos) << u;
  EXPECT_NE(u.find("default \"10s\""), std::string::npos) << u;
  EXPECT_EQ(u.find("3600000ms"), std::string::npos) << u;
}

TEST(FlagSet, FlagBeatsEnvironmentBeatsDefault) {
  std::string zk = "127.0.0.1:2181", root = "/turnstile", id = "default-id";
  std::chrono::milliseconds drain(10000);
  int64_t streams = 5;
  FlagSet f("t");
  f.String("zk", &zk, "");
  f.String("zk-root", &root, "");
  f.String("replica-id", &id, "");
  f.Duration("drain-timeout", &drain, "");
  f.Int("max-streams", &streams, "");
  EXPECT_EQ(FlagSet::EnvName("zk-root"), "TURNSTILE_ZK_ROOT");
  setenv("TURNSTILE_ZK_ROOT", "/from-env", 1);
  setenv("TURNSTILE_ZK", "env:2181", 1);
  setenv("TURNSTILE_DRAIN_TIMEOUT", "3s", 1);
  const char* argv[] = {"t", "--zk=flag:2181", "--max-streams", "9", "pos"};
  bool help = true;
  auto rest = f.Parse(5, const_cast<char**>(argv), &help);
  unsetenv("TURNSTILE_ZK_ROOT");
  unsetenv("TURNSTILE_ZK");
  unsetenv("TURNSTILE_DRAIN_TIMEOUT");
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_FALSE(help);
  EXPECT_EQ(zk, "flag:2181");       // flag wins over env
  EXPECT_EQ(root, "/from-env");     // env wins over default
  EXPECT_EQ(id, "default-id");      // default stays
  EXPECT_EQ(drain.count(), 3000);
  EXPECT_EQ(streams, 9);
  EXPECT_EQ(*rest, std::vector<std::string>{"pos"});
}

TEST(FlagSet, BadInputIsAClearError) {
  int64_t n = 0;
  std::chrono::milliseconds d(0);
  FlagSet f("t");
  f.Int("n", &n, "");
  f.Duration("d", &d, "");
  bool help = false;
  const char* unknown[] = {"t", "--nope=1"};
  EXPECT_FALSE(f.Parse(2, const_cast<char**>(unknown), &help).ok());
  const char* bad_int[] = {"t", "--n=x"};
  auto s = f.Parse(2, const_cast<char**>(bad_int), &help);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--n"), std::string::npos);
  const char* missing[] = {"t", "--d"};
  EXPECT_FALSE(f.Parse(2, const_cast<char**>(missing), &help).ok());
  setenv("TURNSTILE_D", "soon", 1);
  const char* none[] = {"t"};
  auto e = f.Parse(1, const_cast<char**>(none), &help);
  unsetenv("TURNSTILE_D");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("TURNSTILE_D"), std::string::npos);
  const char* h[] = {"t", "--help"};
  EXPECT_TRUE(f.Parse(2, const_cast<char**>(h), &help).ok());
  EXPECT_TRUE(help);
  EXPECT_NE(f.Usage().find("TURNSTILE_N"), std::string::npos);
}

// A switch (--shared): alone it sets, =false/=0 clears, the environment
// takes true/false/1/0, anything else is an error naming the flag; it never
// takes the next argument as its value.
TEST(FlagsTest, BoolSwitch) {
  bool on = false;
  FlagSet f("t");
  f.Bool("shared", &on, "a switch");
  bool help = false;
  const char* set[] = {"t", "--shared", "NAME"};
  auto args = f.Parse(3, const_cast<char**>(set), &help);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_TRUE(on);
  EXPECT_EQ(*args, std::vector<std::string>{"NAME"});
  const char* clear[] = {"t", "--shared=false"};
  ASSERT_TRUE(f.Parse(2, const_cast<char**>(clear), &help).ok());
  EXPECT_FALSE(on);
  const char* bad[] = {"t", "--shared=maybe"};
  auto b = f.Parse(2, const_cast<char**>(bad), &help);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("--shared"), std::string::npos);
  setenv("TURNSTILE_SHARED", "1", 1);
  const char* none[] = {"t"};
  EXPECT_TRUE(f.Parse(1, const_cast<char**>(none), &help).ok());
  unsetenv("TURNSTILE_SHARED");
  EXPECT_TRUE(on);
}

// A custom flag: its setter checks and stores each occurrence (so it may
// repeat), its error is the parse error as the setter wrote it, and Usage shows its
// default text. FlagList is Usage without the heading.
TEST(FlagSet, CustomFlagsRepeatAndTheirErrorsNameThem) {
  std::vector<std::string> servers;
  FlagSet f("t");
  f.Custom("secure-server", "none", "LABEL=ADDRESS, repeatable",
           [&](const std::string& v) -> absl::Status {
             if (v.find('=') == std::string::npos) {
               return absl::InvalidArgumentError("\"" + v + "\" is not LABEL=ADDRESS");
             }
             servers.push_back(v);
             return absl::OkStatus();
           });
  bool help = false;
  const char* two[] = {"t", "--secure-server", "a=h:1", "--secure-server=b=h:2"};
  auto ok = f.Parse(4, const_cast<char**>(two), &help);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(servers, (std::vector<std::string>{"a=h:1", "b=h:2"}));
  const char* bad[] = {"t", "--secure-server", "nolabel"};
  auto b = f.Parse(3, const_cast<char**>(bad), &help);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(), "\"nolabel\" is not LABEL=ADDRESS");
  const std::string usage = f.Usage(), list = f.FlagList();
  EXPECT_NE(list.find("--secure-server"), std::string::npos) << list;
  EXPECT_NE(list.find("none"), std::string::npos) << list;
  EXPECT_NE(usage.find(list), std::string::npos) << "FlagList is part of Usage:\n" << usage;
  EXPECT_LT(list.size(), usage.size());
}

}  // namespace
}  // namespace turnstile
