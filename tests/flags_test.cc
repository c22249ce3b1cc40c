#include "server/flags.h"

#include <gtest/gtest.h>

#include <cstdlib>

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

}  // namespace
}  // namespace turnstile
