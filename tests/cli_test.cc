// The `turnstile` CLI as a user runs it: a real process against an
// in-process replica on the shared real ZooKeeper.
#include <gtest/gtest.h>

#include <unistd.h>

#include <csignal>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "server/recipe/lock_name.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

using v1::AcquireEvent;

// The first descendant of `pid` whose command name is `comm` (from /proc).
pid_t FindDescendant(pid_t pid, const std::string& comm) {
  std::vector<pid_t> frontier = {pid};
  while (!frontier.empty()) {
    pid_t p = frontier.back();
    frontier.pop_back();
    std::string children = ReadFile("/proc/" + std::to_string(p) + "/task/" + std::to_string(p) + "/children");
    for (absl::string_view c : absl::StrSplit(children, ' ', absl::SkipEmpty())) {
      pid_t child = 0;
      if (!absl::SimpleAtoi(c, &child)) continue;
      std::string name = ReadFile("/proc/" + std::to_string(child) + "/comm");
      if (name.substr(0, name.find('\n')) == comm) return child;
      frontier.push_back(child);
    }
  }
  return -1;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    connect_ = SharedZkServer().ConnectString();
    root_ = UniqueRoot("cli");
    replica_ = StartReplica(TestConfig(connect_, root_));
    ASSERT_TRUE(replica_);
    stub_ = NewStub(replica_->address());
    zk_ = std::make_unique<SyncZk>(connect_);
    char tmpl[] = "/tmp/turnstile-cli-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    (void)std::system(cmd.c_str());
  }
  std::vector<std::string> Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {CLI_PATH, "--server", replica_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  std::string LockPath(const std::string& name) { return root_ + "/" + EncodeLockName(name); }

  // Describe of `name` as "H:owner" / "W:owner" in order; empty if it has no
  // contenders (NOT_FOUND); {"?"} on another error.
  std::vector<std::string> Contenders(const std::string& name) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(10000));
    v1::DescribeRequest req;
    req.set_name(name);
    v1::DescribeResponse resp;
    grpc::Status st = stub_->Describe(&ctx, req, &resp);
    if (st.error_code() == grpc::StatusCode::NOT_FOUND) return {};
    if (!st.ok()) return {"?"};
    std::vector<std::string> out;
    for (const auto& c : resp.holders()) out.push_back("H:" + c.owner());
    for (const auto& c : resp.waiters()) out.push_back("W:" + c.owner());
    return out;
  }
  bool AwaitContenders(const std::string& name, const std::vector<std::string>& want,
                       milliseconds timeout = milliseconds(20000)) {
    std::vector<std::string> seen;
    const bool ok = WaitFor([&] { return (seen = Contenders(name)) == want; }, timeout);
    if (!ok) {
      std::string s;
      for (const auto& c : seen) s += c + " ";
      ADD_FAILURE() << name << ": contenders [" << s << "]";
    }
    return ok;
  }
  // A file written by a command (atomically, by rename), trimmed.
  std::optional<std::string> AwaitFile(const std::string& path,
                                       milliseconds timeout = milliseconds(20000)) {
    if (!WaitFor([&] { return access(path.c_str(), F_OK) == 0; }, timeout)) return std::nullopt;
    std::string text = ReadFile(path);
    text.erase(text.find_last_not_of("\n") + 1);
    return text;
  }
  // A shell fragment that writes `value` to `path` atomically.
  static std::string WriteFile(const std::string& path, const std::string& value) {
    return "echo \"" + value + "\" > " + path + ".tmp; mv " + path + ".tmp " + path + "; ";
  }
  // `std::system` of the CLI with `args` (quoted), stdout to `out`; its exit code.
  int CliStatus(const std::vector<std::string>& args, const std::string& out,
                bool with_server = false) {
    std::string cmd;
    for (const auto& a : with_server ? Cli(args) : [&] {
           std::vector<std::string> v = {CLI_PATH};
           v.insert(v.end(), args.begin(), args.end());
           return v;
         }()) {
      cmd += "'" + a + "' ";
    }
    cmd += "> " + out + " 2>/dev/null";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }

  std::string connect_, root_, dir_;
  std::unique_ptr<Replica> replica_;
  std::unique_ptr<v1::LockService::Stub> stub_;
  std::unique_ptr<SyncZk> zk_;
};

TEST_F(CliTest, RunPassesTokenAndLeaseAndReturnsTheCommandsExitCode) {
  std::string out = dir_ + "/env";
  auto p = ChildProcess::Spawn(Cli({"run", "job", "--", "/bin/sh", "-c",
                                    "echo \"$TURNSTILE_LOCK_NAME $TURNSTILE_FENCING_TOKEN "
                                    "$TURNSTILE_LEASE_ID\" > " + out + "; exit 7"}));
  ASSERT_TRUE(p);
  auto code = p->Wait(milliseconds(20000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 7);
  std::vector<std::string> parts = absl::StrSplit(ReadFile(out), absl::ByAnyChar(" \n"), absl::SkipEmpty());
  ASSERT_EQ(parts.size(), 3u) << ReadFile(out);
  EXPECT_EQ(parts[0], "job");
  uint64_t token = 0;
  EXPECT_TRUE(absl::SimpleAtoi(parts[1], &token));
  EXPECT_GT(token, 0u);
  auto lease = ParseLeaseId(parts[2]);
  ASSERT_TRUE(lease.ok()) << parts[2];
  EXPECT_EQ(lease->lock_name, "job");
  // Released afterwards.
  EXPECT_TRUE(WaitFor([&] { return zk_->Contenders(LockPath("job")).empty(); }, milliseconds(10000)));
  // A command killed by a signal: 128 + N.
  auto k = ChildProcess::Spawn(Cli({"run", "job", "--", "/bin/sh", "-c", "kill -9 $$"}));
  auto kcode = k->Wait(milliseconds(20000));
  ASSERT_TRUE(kcode);
  EXPECT_EQ(*kcode, 128 + 9);
}

TEST_F(CliTest, RunExitsWithNotAcquiredCode) {
  AcquireStream holder(stub_.get(), OpenMsg("held", milliseconds(10000)));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
  std::string marker = dir_ + "/ran";
  auto once = ChildProcess::Spawn(Cli({"run", "held", "--timeout", "0", "--", "/bin/sh", "-c", "touch " + marker}));
  auto code = once->Wait(milliseconds(20000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 75);
  auto timed = ChildProcess::Spawn(Cli({"run", "held", "--timeout", "300ms", "--", "/bin/sh", "-c", "touch " + marker}));
  code = timed->Wait(milliseconds(20000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 75);
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the command ran without the lock";
  EXPECT_EQ(zk_->Contenders(LockPath("held")).size(), 1u);
}

TEST_F(CliTest, RunKillsTheCommandWithinTheGracePeriodWhenTheLockIsLost) {
  std::string lease_file = dir_ + "/lease";
  // The command ignores SIGTERM, so only SIGKILL after --grace stops it.
  auto p = ChildProcess::Spawn(Cli({"run", "lose", "--grace", "1s", "--", "/bin/sh", "-c",
                                    "echo $TURNSTILE_LEASE_ID > " + lease_file +
                                        ".tmp; mv " + lease_file + ".tmp " + lease_file +
                                        "; trap '' TERM; while :; do sleep 0.05; done"}));
  ASSERT_TRUE(p);
  ASSERT_TRUE(WaitFor([&] { return access(lease_file.c_str(), F_OK) == 0; }, milliseconds(20000)));
  std::string lease = ReadFile(lease_file);
  lease.erase(lease.find_last_not_of("\n") + 1);
  grpc::ClientContext ctx;
  v1::ReleaseRequest req;
  req.set_lease_id(lease);
  v1::ReleaseResponse resp;
  ASSERT_TRUE(stub_->Release(&ctx, req, &resp).ok());  // revoke it
  auto start = std::chrono::steady_clock::now();
  auto code = p->Wait(milliseconds(15000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 76);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, milliseconds(900));   // SIGTERM was ignored for the grace period
  EXPECT_LE(took, milliseconds(6000));  // then SIGKILL
}

TEST_F(CliTest, TwoRunsOnOneLockNeverOverlap) {
  std::string log = dir_ + "/log";
  std::string script = "for i in 1 2 3 4 5; do :; done; echo START $$ >> " + log +
                       "; sleep 0.1; echo END $$ >> " + log;
  std::vector<std::unique_ptr<ChildProcess>> runs;
  for (int i = 0; i < 4; ++i) {
    runs.push_back(ChildProcess::Spawn(Cli({"run", "shared", "--", "/bin/sh", "-c", script})));
  }
  for (auto& r : runs) {
    auto code = r->Wait(milliseconds(30000));
    ASSERT_TRUE(code);
    EXPECT_EQ(*code, 0);
  }
  std::vector<std::string> lines = absl::StrSplit(ReadFile(log), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 8u);
  for (size_t i = 0; i < lines.size(); i += 2) {
    ASSERT_EQ(lines[i].rfind("START ", 0), 0u) << lines[i];
    ASSERT_EQ(lines[i + 1].rfind("END ", 0), 0u) << lines[i + 1];
    EXPECT_EQ(lines[i].substr(6), lines[i + 1].substr(4)) << "sections interleaved";
  }
}

// --output json: every line is one JSON object (checked with Python's json).
// Issue 12: --shared takes a read hold beside another shared holder; the
// same try-once without --shared is refused (exit 75).
TEST_F(CliTest, SharedRunsBesideAnotherReader) {
  v1::AcquireOpen open = OpenMsg("books", milliseconds(10000), "reader");
  open.set_kind(v1::LOCK_KIND_SHARED);
  AcquireStream reader(stub_.get(), open);
  ASSERT_TRUE(reader.Await(AcquireEvent::ACQUIRED));
  auto shared = ChildProcess::Spawn(Cli({"run", "books", "--shared", "--timeout", "0", "--",
                                         "/bin/sh", "-c", "exit 7"}));
  ASSERT_TRUE(shared);
  EXPECT_EQ(shared->Wait(milliseconds(20000)), std::optional<int>(7));
  auto exclusive = ChildProcess::Spawn(Cli({"run", "books", "--timeout", "0", "--",
                                            "/bin/sh", "-c", "exit 7"}));
  ASSERT_TRUE(exclusive);
  EXPECT_EQ(exclusive->Wait(milliseconds(20000)), std::optional<int>(75));
}

// Issue 21: `turnstile run --max-holders N` takes a permit of a semaphore
// beside a gRPC holder; a try-once finds all permits taken (exit 75); a
// disagreeing N is an error (exit 1); `describe` shows N and the holders.
TEST_F(CliTest, RunTakesASemaphorePermitAndDescribeShowsN) {
  v1::AcquireOpen open = OpenMsg("pool", milliseconds(10000), "grpc-permit");
  open.set_kind(v1::LOCK_KIND_SEMAPHORE);
  open.set_max_holders(2);
  AcquireStream permit(stub_.get(), open);
  ASSERT_TRUE(permit.Await(AcquireEvent::ACQUIRED));
  // While the CLI holds the second permit, a third try-once is refused.
  const std::string out = dir_ + "/describe.txt";
  const std::string inner = std::string(CLI_PATH) + " --server " + replica_->address() +
                            " describe pool > " + out + "; " + CLI_PATH + " --server " +
                            replica_->address() +
                            " run pool --max-holders 2 --timeout 0 -- /bin/true; exit $?";
  auto run = ChildProcess::Spawn(Cli({"run", "pool", "--max-holders", "2", "--timeout", "0", "--",
                                      "/bin/sh", "-c", inner}));
  ASSERT_TRUE(run);
  EXPECT_EQ(run->Wait(milliseconds(20000)), std::optional<int>(75));
  const std::string text = ReadFile(out);
  EXPECT_NE(text.find("SEMAPHORE max_holders=2 holders=2 waiters=0"), std::string::npos) << text;
  EXPECT_NE(text.find("HOLDER position=1 owner=grpc-permit"), std::string::npos) << text;
  // Another N: FAILED_PRECONDITION (exit 75, as every refusal to grant),
  // saying why.
  const std::string err = dir_ + "/other-n.txt";
  const int status = std::system((std::string(CLI_PATH) + " --server " + replica_->address() +
                                  " run pool --max-holders 3 --timeout 0 -- /bin/true 2> " + err)
                                     .c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 75);
  EXPECT_NE(ReadFile(err).find("a semaphore of max_holders 2"), std::string::npos) << ReadFile(err);
  auto bad = ChildProcess::Spawn(Cli({"run", "pool", "--max-holders", "-1", "--", "/bin/true"}));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->Wait(milliseconds(20000)), std::optional<int>(2));
}

// Issue 12 must-show 4: `turnstile revoke` reaches a `turnstile run` holder,
// which passes it to the command as SIGTERM (the command exits, the lock is
// released); with --on-revoke ignore the command keeps running and the lock
// stays held.
TEST_F(CliTest, RunPassesARevocationRequestAsSigterm) {
  const std::string script =
      "trap 'exit 3' TERM; echo READY $TURNSTILE_LEASE_ID; while :; do sleep 0.05; done";
  auto run = ChildProcess::Spawn(Cli({"run", "revoked", "--", "/bin/sh", "-c", script}));
  ASSERT_TRUE(run);
  auto ready = run->AwaitLine("READY", milliseconds(20000));
  ASSERT_TRUE(ready);
  const std::string lease = ready->substr(6);
  auto revoke = ChildProcess::Spawn(Cli({"revoke", lease, "maintenance"}));
  ASSERT_TRUE(revoke);
  EXPECT_EQ(revoke->Wait(milliseconds(20000)), std::optional<int>(0));
  EXPECT_EQ(run->Wait(milliseconds(20000)), std::optional<int>(3));
  EXPECT_TRUE(WaitFor([&] { return zk_->Contenders(LockPath("revoked")).empty(); },
                      milliseconds(10000)));

  auto keep = ChildProcess::Spawn(
      Cli({"run", "kept", "--on-revoke", "ignore", "--", "/bin/sh", "-c", script}));
  ASSERT_TRUE(keep);
  ready = keep->AwaitLine("READY", milliseconds(20000));
  ASSERT_TRUE(ready);
  auto ignored = ChildProcess::Spawn(Cli({"revoke", ready->substr(6), "please"}));
  ASSERT_TRUE(ignored);
  EXPECT_EQ(ignored->Wait(milliseconds(20000)), std::optional<int>(0));
  // The request reached the holder's node (Describe shows it) ...
  ASSERT_TRUE(WaitFor([&] {
    grpc::ClientContext ctx;
    v1::DescribeRequest req;
    req.set_name("kept");
    v1::DescribeResponse resp;
    return stub_->Describe(&ctx, req, &resp).ok() && resp.holders_size() == 1 &&
           resp.holders(0).revoke_requests() == 1;
  }, milliseconds(10000)));
  // ... and over a bounded observation period the command runs on, holding.
  EXPECT_FALSE(keep->Wait(milliseconds(500)));
  EXPECT_EQ(zk_->Contenders(LockPath("kept")).size(), 1u);
  keep->Signal(SIGTERM);  // forwarded to the command
  EXPECT_EQ(keep->Wait(milliseconds(20000)), std::optional<int>(3));
}

// A wait above the replica's limit (--max-wait-timeout, 1h here) is told
// in the units of the flag: "2h", "1h", never milliseconds. JSON output
// keeps the replica's whole message, the milliseconds for scripts included.
TEST_F(CliTest, AWaitOverTheLimitIsToldAsFlagsWriteDurations) {
  auto run = [&](std::vector<std::string> args) {
    std::string cmd = "exec";
    for (const auto& a : Cli(std::move(args))) cmd += " '" + a + "'";
    return ChildProcess::Spawn({"/bin/sh", "-c", cmd + " 2>&1"});
  };
  auto p = run({"acquire", "too-long", "--wait", "2h"});
  ASSERT_TRUE(p);
  auto line = p->AwaitLine("turnstile: ", milliseconds(20000));
  ASSERT_TRUE(line) << "no error line";
  EXPECT_EQ(*line,
            "turnstile: INVALID_ARGUMENT: wait_timeout is 2h; it must be 0..1h (--max-wait-timeout)");
  auto code = p->Wait(milliseconds(20000));
  ASSERT_TRUE(code);
  EXPECT_NE(*code, 0);
  auto json = run({"--output", "json", "acquire", "too-long", "--wait", "1h30s"});
  ASSERT_TRUE(json);
  line = json->AwaitLine("{\"error\"", milliseconds(20000));
  ASSERT_TRUE(line) << "no JSON error line";
  EXPECT_NE(line->find("wait_timeout is 1h30s; it must be 0..1h (--max-wait-timeout) "
                       "[wait_timeout is 3630000ms; it must be 0..3600000ms]"),
            std::string::npos)
      << *line;
  EXPECT_TRUE(json->Wait(milliseconds(20000)));
  EXPECT_TRUE(zk_->Contenders(LockPath("too-long")).empty());
}

TEST_F(CliTest, JsonOutputParses) {
  AcquireStream holder(stub_.get(), OpenMsg("json\"lock", milliseconds(10000), "o\"wner"));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
  for (std::vector<std::string> args : {std::vector<std::string>{"--output", "json", "describe", "json\"lock"},
                                        std::vector<std::string>{"--output", "json", "list"},
                                        std::vector<std::string>{"--output", "json", "acquire", "other", "--hold", "10ms"},
                                        std::vector<std::string>{"--output", "json", "acquire", "json\"lock", "--wait", "0"}}) {
    std::string out = dir_ + "/out.json";
    std::string cmd;
    for (const auto& a : Cli(args)) cmd += "'" + a + "' ";
    cmd += "> " + out + " 2>/dev/null; /usr/bin/python3 -c 'import json,sys\n"
           "lines=[l for l in open(sys.argv[1]) if l.strip()]\nassert lines\n"
           "[json.loads(l) for l in lines]' " + out;
    SCOPED_TRACE(cmd);
    EXPECT_EQ(std::system(cmd.c_str()), 0) << ReadFile(out);
  }
  std::string out = dir_ + "/describe.json";
  std::string cmd;
  for (const auto& a : Cli({"--output", "json", "describe", "json\"lock"})) cmd += "'" + a + "' ";
  cmd += "> " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_NE(ReadFile(out).find("\"owner\":\"o\\\"wner\""), std::string::npos) << ReadFile(out);
}

// A free lock is an answer, not an error: `describe` prints FREE and exits
// 0 (JSON: no contenders), for a name never used and for one whose holder
// has let go; any other failure still exits 1. A command `run` cannot start
// exits 127, as in a shell, and leaves the lock free.
TEST_F(CliTest, DescribeOfAFreeLockSaysFreeAndExits0) {
  const std::string out = dir_ + "/describe.txt";
  EXPECT_EQ(CliStatus({"describe", "never-used"}, out, /*with_server=*/true), 0);
  EXPECT_EQ(ReadFile(out), "FREE holders=0 waiters=0\n");
  EXPECT_EQ(CliStatus({"--output", "json", "describe", "never-used"}, out, true), 0);
  EXPECT_EQ(ReadFile(out), "{\"name\":\"never-used\",\"contenders\":[]}\n");

  EXPECT_EQ(CliStatus({"run", "let-go", "--", dir_ + "/no-such-command"}, out, true), 127);
  ASSERT_TRUE(AwaitContenders("let-go", {}));
  EXPECT_EQ(CliStatus({"describe", "let-go"}, out, true), 0);
  EXPECT_EQ(ReadFile(out), "FREE holders=0 waiters=0\n");

  // Nobody listening: UNAVAILABLE is an error, not a free lock.
  EXPECT_EQ(CliStatus({"--server", "127.0.0.1:1", "--rpc-timeout", "2s", "describe", "never-used"},
                      out),
            1);
  EXPECT_EQ(ReadFile(out), "");
}

// Every command has its own help (--help, -h, `help COMMAND`): exactly one
// "Usage:" header naming the command, its own flags with their defaults,
// then the global flags. `turnstile help`, -h and --help give the general
// help; an unknown command is a usage error (2).
TEST_F(CliTest, EverySubcommandHasItsOwnHelp) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> own = {
      {"acquire", {"--wait (TURNSTILE_WAIT, default \"1h\")", "--hold", "--ttl"}},
      {"run", {"--on-revoke (TURNSTILE_ON_REVOKE, default \"term\")", "--grace", "--timeout"}},
      {"elect", {"--grace (TURNSTILE_GRACE, default \"10s\")", "--lock-delay"}},
      {"observe", {"--count (TURNSTILE_COUNT, default \"0\")"}},
      {"describe", {"describe NAME", "Flags: none of its own."}},
      {"check", {"check NAME TOKEN [--stale]", "--stale", "77 SUPERSEDED", "78 WAITING"}},
      {"list", {"list [PREFIX]", "Flags: none of its own."}},
      {"release", {"release LEASE_ID", "Flags: none of its own."}},
      {"revoke", {"revoke LEASE_ID [REASON]", "Flags: none of its own."}},
      {"health", {"health [SERVICE]", "Flags: none of its own."}},
  };
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const std::string out = dir_ + "/help.txt";
  std::set<std::string> texts;
  for (const auto& [sub, needles] : own) {
    SCOPED_TRACE(sub);
    ASSERT_EQ(CliStatus({sub, "--help"}, out), 0);
    const std::string text = ReadFile(out);
    EXPECT_EQ(count(text, "Usage:"), 1u) << text;
    EXPECT_EQ(text.rfind("Usage: turnstile [global flags] " + sub, 0), 0u) << text;
    for (const auto& n : needles) EXPECT_NE(text.find(n), std::string::npos) << n << "\n" << text;
    // The global flags, with their defaults.
    EXPECT_NE(text.find("--server (TURNSTILE_SERVER, default \"127.0.0.1:7400\")"),
              std::string::npos) << text;
    EXPECT_EQ(text.find("Commands:"), std::string::npos) << "the general help\n" << text;
    texts.insert(text);
    // -h and `help COMMAND` say the same.
    ASSERT_EQ(CliStatus({sub, "-h"}, out), 0);
    EXPECT_EQ(ReadFile(out), text);
    ASSERT_EQ(CliStatus({"help", sub}, out), 0);
    EXPECT_EQ(ReadFile(out), text);
  }
  EXPECT_EQ(texts.size(), own.size()) << "two commands share a help text";
  for (const char* general : {"--help", "-h", "help"}) {
    SCOPED_TRACE(general);
    ASSERT_EQ(CliStatus({general}, out), 0);
    const std::string text = ReadFile(out);
    EXPECT_EQ(count(text, "Usage:"), 1u) << text;
    EXPECT_NE(text.find("Commands:"), std::string::npos) << text;
    EXPECT_NE(text.find("--rpc-timeout (TURNSTILE_RPC_TIMEOUT, default \"10s\")"),
              std::string::npos) << text;
  }
  EXPECT_EQ(CliStatus({"nonsense"}, out), 2);
  EXPECT_EQ(CliStatus({"help", "nonsense"}, out), 2);
  EXPECT_EQ(CliStatus({"describe"}, out), 2);  // no NAME
  EXPECT_EQ(CliStatus({}, out), 2);
}

// SIGINT or SIGTERM to an `acquire`, `run` or `elect` waiting in the queue
// gives the wait up: the shell's exit code (130, 143), its node gone at once
// (Describe; a waiter queued behind it is granted as soon as the holder
// lets go, not after a session timeout), and the command never started.
TEST_F(CliTest, AStopSignalWhileWaitingGivesTheWaitUp) {
  int round = 0;
  for (const std::string kind : {"acquire", "run", "elect"}) {
    for (const int sig : {SIGINT, SIGTERM}) {
      const std::string name = "wait-" + kind + "-" + std::to_string(sig);
      SCOPED_TRACE(name);
      const std::string marker = dir_ + "/started-" + std::to_string(++round);
      std::vector<std::string> args = {"--owner", "cli-waiter", kind, name};
      if (kind == "elect") args.push_back("v");
      if (kind != "acquire") {
        args.insert(args.end(), {"--", "/bin/sh", "-c", "touch " + marker});
      }
      AcquireStream holder(stub_.get(), OpenMsg(name, milliseconds(60000), "holder"));
      ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
      auto cli = ChildProcess::Spawn(Cli(args));
      ASSERT_TRUE(cli);
      ASSERT_TRUE(AwaitContenders(name, {"H:holder", "W:cli-waiter"}));
      AcquireStream next(stub_.get(), OpenMsg(name, milliseconds(60000), "next"));
      ASSERT_TRUE(AwaitContenders(name, {"H:holder", "W:cli-waiter", "W:next"}));

      cli->Signal(sig);
      EXPECT_EQ(cli->Wait(milliseconds(10000)), std::optional<int>(128 + sig));
      // Its node is deleted at once: well within the session timeout (6 s).
      EXPECT_TRUE(AwaitContenders(name, {"H:holder", "W:next"}, milliseconds(3000)));
      EXPECT_EQ(zk_->Contenders(LockPath(name)).size(), 2u);
      // The next waiter is not held back by it.
      const auto released_at = std::chrono::steady_clock::now();
      holder.SendRelease();
      ASSERT_TRUE(next.Await(AcquireEvent::ACQUIRED, milliseconds(3000)));
      EXPECT_LT(std::chrono::steady_clock::now() - released_at, milliseconds(3000));
      EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the command started";
      if (kind == "acquire") {
        std::string out = cli->ReadSome(milliseconds(0));
        EXPECT_EQ(out.find("ACQUIRED"), std::string::npos) << out;
      }
      next.SendRelease();
      ASSERT_TRUE(next.Await(AcquireEvent::RELEASED));
    }
  }
}

// A command that winds down for 2 s after SIGTERM, logging START/END. One
// holder's hold is ended (revoked, or a signal to its `turnstile`) while a
// second waits: the second command starts only after the first has ended.
class CliHandoverTest : public CliTest {
 protected:
  std::string Script(const std::string& id) {
    return WriteFile(dir_ + "/lease-" + id, "$TURNSTILE_LEASE_ID") + "echo START " + id +
           " >> " + log_ + "; trap 'sleep 2; echo END " + id + " >> " + log_ +
           "; exit 0' TERM; while :; do sleep 0.05; done";
  }
  // `end_first(lease of the first, its process)` ends the first hold.
  void Handover(const std::vector<std::string>& command, const std::string& name,
                const std::function<void(const std::string&, ChildProcess&)>& end_first,
                int first_exit_code) {
    auto with = [&](const std::string& id) {
      std::vector<std::string> args = {"--owner", id};
      args.insert(args.end(), command.begin(), command.end());
      args.insert(args.end(), {"--", "/bin/sh", "-c", Script(id)});
      return Cli(args);
    };
    auto a = ChildProcess::Spawn(with("A"));
    ASSERT_TRUE(a);
    auto lease = AwaitFile(dir_ + "/lease-A");
    ASSERT_TRUE(lease);
    auto b = ChildProcess::Spawn(with("B"));
    ASSERT_TRUE(b);
    ASSERT_TRUE(AwaitContenders(name, {"H:A", "W:B"}));
    end_first(*lease, *a);
    EXPECT_EQ(a->Wait(milliseconds(20000)), std::optional<int>(first_exit_code));
    ASSERT_TRUE(WaitFor([&] { return ReadFile(log_).find("START B") != std::string::npos; },
                        milliseconds(20000)))
        << ReadFile(log_);
    EXPECT_EQ(ReadFile(log_), "START A\nEND A\nSTART B\n") << "the two commands overlapped";
    b->Signal(SIGTERM);  // passed to B's command, which winds down
    EXPECT_EQ(b->Wait(milliseconds(20000)), std::optional<int>(0));
    EXPECT_EQ(ReadFile(log_), "START A\nEND A\nSTART B\nEND B\n");
    EXPECT_TRUE(AwaitContenders(name, {}));
  }
  void Revoke(const std::string& lease) {
    grpc::ClientContext ctx;
    v1::RevokeRequest req;
    req.set_lease_id(lease);
    req.set_reason("maintenance");
    v1::RevokeResponse resp;
    ASSERT_TRUE(stub_->Revoke(&ctx, req, &resp).ok());
  }
  std::string log_;  // set in SetUp, once dir_ is
  void SetUp() override {
    CliTest::SetUp();
    log_ = dir_ + "/log";
  }
};

TEST_F(CliHandoverTest, ARevokedLeaderResignsOnlyAfterItsCommandExited) {
  Handover({"elect", "lead", "v"}, "lead",
           [&](const std::string& lease, ChildProcess&) { Revoke(lease); }, 0);
}

TEST_F(CliHandoverTest, ALeaderStoppedBySigtermResignsOnlyAfterItsCommandExited) {
  Handover({"elect", "lead", "v"}, "lead",
           [&](const std::string&, ChildProcess& first) { first.Signal(SIGTERM); }, 0);
}

TEST_F(CliHandoverTest, RunOnRevokeTermReleasesOnlyAfterItsCommandExited) {
  Handover({"run", "job", "--on-revoke", "term"}, "job",
           [&](const std::string& lease, ChildProcess&) { Revoke(lease); }, 0);
}

// --on-revoke ignore: the request changes nothing (the command runs on,
// the lock stays); a SIGTERM to `turnstile` then ends the command, and
// only after it has exited does the lock pass.
TEST_F(CliHandoverTest, RunOnRevokeIgnoreKeepsTheLockUntilItsCommandExited) {
  Handover({"run", "job", "--on-revoke", "ignore"}, "job",
           [&](const std::string& lease, ChildProcess& first) {
             Revoke(lease);
             ASSERT_TRUE(WaitFor([&] {
               grpc::ClientContext ctx;
               v1::DescribeRequest req;
               req.set_name("job");
               v1::DescribeResponse resp;
               return stub_->Describe(&ctx, req, &resp).ok() && resp.holders_size() == 1 &&
                      resp.holders(0).revoke_requests() == 1;
             }, milliseconds(10000)));
             EXPECT_FALSE(first.Wait(milliseconds(500)));  // runs on, over a bounded time
             EXPECT_EQ(ReadFile(log_), "START A\n");
             first.Signal(SIGTERM);
           },
           0);
}

// kill -9 of `turnstile run` / `elect`: its command does not outlive it
// (a parent-death signal), though the lock passes at once.
TEST_F(CliTest, ACommandDoesNotOutliveAKilledCli) {
  // Gone, or a zombie nobody reaped yet.
  auto gone = [](pid_t pid) {
    const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    if (stat.empty()) return true;
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
  };
  for (const std::string kind : {"run", "elect"}) {
    SCOPED_TRACE(kind);
    const std::string pid_file = dir_ + "/pid-" + kind;
    std::vector<std::string> args = {kind, "killed-" + kind};
    if (kind == "elect") args.push_back("v");
    args.insert(args.end(), {"--", "/bin/sh", "-c",
                             WriteFile(pid_file, "$$") + "trap '' TERM; while :; do sleep 0.05; done"});
    auto cli = ChildProcess::Spawn(Cli(args));
    ASSERT_TRUE(cli);
    auto text = AwaitFile(pid_file);
    ASSERT_TRUE(text);
    pid_t command = 0;
    ASSERT_TRUE(absl::SimpleAtoi(*text, &command)) << *text;
    ASSERT_FALSE(gone(command));
    cli->Signal(SIGKILL);
    EXPECT_EQ(cli->Wait(milliseconds(10000)), std::optional<int>(-SIGKILL));
    EXPECT_TRUE(WaitFor([&] { return gone(command); }, milliseconds(10000)))
        << "the command " << command << " outlived turnstile";
    EXPECT_TRUE(AwaitContenders("killed-" + kind, {}));
  }
}

// The CLI is a client: it links neither the engine nor the ZooKeeper
// client (issue 20), and `turnstile bench` runs the separate turnstile-bench.
TEST_F(CliTest, TheCliLinksNoEngineAndBenchRunsTheBenchProgram) {
  const std::string binary = ReadFile(CLI_PATH);
  ASSERT_GT(binary.size(), 100000u);
  // Names the ZooKeeper C client's and the engine's code would bring in
  // (the symbol table is kept: the build does not strip).
  for (const char* symbol : {"zookeeper_init", "zoo_acreate", "LockEngine"}) {
    EXPECT_EQ(binary.find(symbol), std::string::npos) << symbol;
  }
  EXPECT_NE(binary.find("AcquireRequest"), std::string::npos);  // the check can see symbols

  const std::string out = dir_ + "/bench-help.txt";
  ASSERT_EQ(std::system((std::string(CLI_PATH) + " bench --help > " + out).c_str()), 0);
  EXPECT_NE(ReadFile(out).find("usage: turnstile bench"), std::string::npos) << ReadFile(out);
  // The bench's own flag checking answers, with its usage exit code.
  const int status = std::system((std::string(CLI_PATH) + " bench --no-such-flag 2> " + out).c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(ReadFile(out).find("unknown flag --no-such-flag"), std::string::npos) << ReadFile(out);
}

// `health` (the container HEALTHCHECK): exit 0 and SERVING from a live
// replica; exit 1 and NOT_SERVING from a replica whose ZooKeeper is
// unreachable; exit 1 when nothing listens.
TEST_F(CliTest, HealthExitsZeroOnlyWhenServing) {
  std::string out = dir_ + "/health.txt";
  auto run = [&](const std::string& server, const std::string& extra,
                 const std::string& service = "") {
    std::string cmd = std::string(CLI_PATH) + " --server " + server + " --rpc-timeout 2s " +
                      extra + " health " + service + " > " + out + " 2>/dev/null";
    int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  EXPECT_EQ(run(replica_->address(), ""), 0);
  EXPECT_EQ(ReadFile(out), "SERVING\n");
  EXPECT_EQ(run(replica_->address(), "--output json"), 0);
  EXPECT_EQ(ReadFile(out), "{\"status\":\"SERVING\"}\n");

  // A replica pointed at a ZooKeeper port nobody listens on serves gRPC but
  // is NOT_SERVING.
  ReplicaConfig cfg = TestConfig("127.0.0.1:" + std::to_string(FreeLoopbackPort()), root_);
  auto no_zk = Replica::Start(cfg);
  ASSERT_TRUE(no_zk.ok()) << no_zk.status();
  EXPECT_EQ(run((*no_zk)->address(), ""), 1);
  EXPECT_EQ(ReadFile(out), "NOT_SERVING\n");
  // ...while its "liveness" service (Kubernetes liveness probes) is SERVING:
  // restarting a replica because ZooKeeper is away would not help.
  EXPECT_EQ(run((*no_zk)->address(), "", "liveness"), 0);
  EXPECT_EQ(ReadFile(out), "SERVING\n");
  EXPECT_EQ(run(replica_->address(), "", "liveness"), 0);
  EXPECT_EQ(run(replica_->address(), "", "no-such-service"), 1);

  // Nothing listening: an error, exit 1.
  EXPECT_EQ(run("127.0.0.1:" + std::to_string(FreeLoopbackPort()), ""), 1);
  EXPECT_EQ(ReadFile(out), "");
}

// `acquire` on a terminal shows the live queue position while it waits,
// prints the fencing token once granted, and releases on Ctrl-C (SIGINT).
// `script` (util-linux) gives the CLI a pseudo-terminal.
TEST_F(CliTest, AcquireShowsLivePositionOnATerminalAndReleasesOnInterrupt) {
  AcquireStream first(stub_.get(), OpenMsg("tty", milliseconds(10000)));
  ASSERT_TRUE(first.Await(AcquireEvent::ACQUIRED));
  AcquireStream second(stub_.get(), OpenMsg("tty", milliseconds(10000)));
  ASSERT_TRUE(second.Next());
  std::string cli;
  for (const auto& a : Cli({"acquire", "tty"})) cli += "'" + a + "' ";
  auto p = ChildProcess::Spawn({"/usr/bin/script", "-qfec", cli, "/dev/null"});
  ASSERT_TRUE(p);
  // Two ahead (the holder and the other waiter), then one.
  std::string seen;
  ASSERT_TRUE(WaitFor([&] {
    seen += p->ReadSome(milliseconds(50));
    return seen.find("2 ahead") != std::string::npos;
  }, milliseconds(15000))) << seen;
  first.SendRelease();
  ASSERT_TRUE(first.Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(second.Await(AcquireEvent::ACQUIRED));
  second.SendRelease();
  ASSERT_TRUE(WaitFor([&] {
    seen += p->ReadSome(milliseconds(50));
    return seen.find("ACQUIRED fencing_token=") != std::string::npos;
  }, milliseconds(15000))) << seen;
  EXPECT_NE(seen.find("1 ahead"), std::string::npos) << seen;
  auto nodes = zk_->Contenders(LockPath("tty"));
  ASSERT_EQ(nodes.size(), 1u);
  // Ctrl-C: SIGINT to the CLI, which runs in `script`'s own session.
  pid_t cli_pid = FindDescendant(p->pid(), "turnstile");
  ASSERT_GT(cli_pid, 0);
  kill(cli_pid, SIGINT);
  ASSERT_TRUE(WaitFor([&] {
    seen += p->ReadSome(milliseconds(50));
    return seen.find("RELEASED") != std::string::npos;
  }, milliseconds(15000))) << seen;
  auto code = p->Wait(milliseconds(10000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 0) << seen;
  EXPECT_TRUE(WaitFor([&] { return zk_->Contenders(LockPath("tty")).empty(); }, milliseconds(10000)));
}

// Issue 23: `elect` runs its command while leader, passing the term; a
// revocation makes the leader step down (SIGTERM to its command, which
// ends the run with the command's code) and the next candidate leads; a
// lost leadership stops the command and exits 76. `observe` prints every
// change of leader, with the leader's value.
TEST_F(CliTest, ElectRunsTheCommandWhileLeaderAndObserveFollowsTheLeaders) {
  auto observer = ChildProcess::Spawn(Cli({"observe", "leader"}));
  ASSERT_TRUE(observer);
  ASSERT_TRUE(observer->AwaitLine("FREE", milliseconds(20000)));
  const std::string a_file = dir_ + "/a", b_file = dir_ + "/b";
  auto script = [](const std::string& file, const std::string& tail) {
    return "echo \"$TURNSTILE_FENCING_TOKEN $TURNSTILE_LEASE_ID\" > " + file + ".tmp; mv " +
           file + ".tmp " + file + "; " + tail;
  };
  auto a = ChildProcess::Spawn(
      Cli({"elect", "leader", "10.0.0.1:80", "--", "/bin/sh", "-c",
           script(a_file, "while :; do sleep 0.05; done")}));
  ASSERT_TRUE(a);
  ASSERT_TRUE(WaitFor([&] { return access(a_file.c_str(), F_OK) == 0; }, milliseconds(20000)));
  std::vector<std::string> a_parts = absl::StrSplit(ReadFile(a_file), absl::ByAnyChar(" \n"),
                                                    absl::SkipEmpty());
  ASSERT_EQ(a_parts.size(), 2u);
  auto line = observer->AwaitLine("HELD", milliseconds(20000));
  ASSERT_TRUE(line);
  EXPECT_NE(line->find("value=10.0.0.1:80"), std::string::npos) << *line;
  EXPECT_NE(line->find("fencing_token=" + a_parts[0]), std::string::npos) << *line;

  auto b = ChildProcess::Spawn(
      Cli({"elect", "leader", "10.0.0.2:80", "--", "/bin/sh", "-c",
           script(b_file, "while :; do sleep 0.05; done")}));
  ASSERT_TRUE(b);
  line = observer->AwaitLine("HELD holders=1 waiters=1", milliseconds(20000));
  ASSERT_TRUE(line);
  EXPECT_NE(access(b_file.c_str(), F_OK), 0) << "a second leader ran";

  // Revoke A: it steps down; its command gets SIGTERM (sh dies of it).
  grpc::ClientContext ctx;
  v1::RevokeRequest req;
  req.set_lease_id(a_parts[1]);
  req.set_reason("maintenance");
  v1::RevokeResponse resp;
  ASSERT_TRUE(stub_->Revoke(&ctx, req, &resp).ok());
  auto code = a->Wait(milliseconds(20000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 128 + SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return access(b_file.c_str(), F_OK) == 0; }, milliseconds(20000)));
  std::vector<std::string> b_parts = absl::StrSplit(ReadFile(b_file), absl::ByAnyChar(" \n"),
                                                    absl::SkipEmpty());
  ASSERT_EQ(b_parts.size(), 2u);
  EXPECT_GT(std::stoull(b_parts[0]), std::stoull(a_parts[0])) << "terms increase";
  // Every line names a leader in order: A's until B's.
  for (;;) {
    line = observer->ReadLine(milliseconds(20000));
    ASSERT_TRUE(line);
    if (line->find("value=10.0.0.2:80") != std::string::npos) break;
    ASSERT_NE(line->find("value=10.0.0.1:80"), std::string::npos) << *line;
  }
  EXPECT_NE(line->find("fencing_token=" + b_parts[0]), std::string::npos) << *line;

  // B's leadership is lost (its lease released from outside): 76.
  grpc::ClientContext rctx;
  v1::ReleaseRequest rreq;
  rreq.set_lease_id(b_parts[1]);
  v1::ReleaseResponse rresp;
  ASSERT_TRUE(stub_->Release(&rctx, rreq, &rresp).ok());
  code = b->Wait(milliseconds(20000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 76);
  ASSERT_TRUE(observer->AwaitLine("FREE", milliseconds(20000)));
  observer->Signal(SIGINT);
  code = observer->Wait(milliseconds(20000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 0);
}

TEST_F(CliTest, ElectGivesUpAfterItsTimeoutAndObserveJsonCountsLines) {
  AcquireStream holder(stub_.get(), OpenMsg("busy", milliseconds(10000), "incumbent"));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
  const std::string marker = dir_ + "/ran";
  auto e = ChildProcess::Spawn(Cli({"elect", "busy", "v", "--timeout", "300ms", "--", "/bin/sh",
                                    "-c", "touch " + marker}));
  auto code = e->Wait(milliseconds(20000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 75);
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the command ran without leadership";
  auto o = ChildProcess::Spawn(Cli({"--output", "json", "observe", "busy", "--count", "2"}));
  auto first = o->ReadLine(milliseconds(20000));
  ASSERT_TRUE(first);
  EXPECT_NE(first->find("\"state\":\"current\""), std::string::npos) << *first;
  EXPECT_NE(first->find("\"owner\":\"incumbent\""), std::string::npos) << *first;
  holder.SendRelease();
  auto second = o->ReadLine(milliseconds(20000));
  ASSERT_TRUE(second);
  EXPECT_NE(second->find("\"holders\":[]"), std::string::npos) << *second;
  code = o->Wait(milliseconds(20000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 0);
  EXPECT_EQ(std::system((std::string(CLI_PATH) + " elect onlyname 2> /dev/null").c_str()) >> 8, 2);
}

// Issue 23: `run A B C -- CMD` takes every lock or none, in byte order.
TEST_F(CliTest, RunWithSeveralNamesTakesAllOrNone) {
  AcquireStream holder(stub_.get(), OpenMsg("m-b", milliseconds(10000)));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
  const std::string marker = dir_ + "/ran";
  auto p = ChildProcess::Spawn(
      Cli({"run", "m-c", "m-b", "m-a", "--timeout", "300ms", "--", "/bin/sh", "-c", "touch " + marker}));
  auto code = p->Wait(milliseconds(20000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 75);
  EXPECT_NE(access(marker.c_str(), F_OK), 0);
  // m-a (taken first, in byte order) was released; m-c was never tried.
  EXPECT_TRUE(WaitFor([&] { return zk_->Contenders(LockPath("m-a")).empty(); }, milliseconds(10000)));
  EXPECT_TRUE(zk_->Contenders(LockPath("m-c")).empty());
  holder.SendRelease();
  ASSERT_TRUE(holder.Await(AcquireEvent::RELEASED));
  const std::string out = dir_ + "/env";
  p = ChildProcess::Spawn(Cli({"run", "m-c", "m-b", "m-a", "--", "/bin/sh", "-c",
                               "echo $TURNSTILE_LOCK_COUNT $TURNSTILE_LOCK_NAME_0 "
                               "$TURNSTILE_LOCK_NAME_1 $TURNSTILE_LOCK_NAME_2 "
                               "$TURNSTILE_LOCK_NAME > " + out}));
  code = p->Wait(milliseconds(20000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 0);
  EXPECT_EQ(ReadFile(out), "3 m-a m-b m-c m-a\n");
  EXPECT_EQ(std::system((std::string(CLI_PATH) + " run x x -- true 2> /dev/null").c_str()) >> 8, 2);
}

// `turnstile check NAME TOKEN`: a script reads the verdict from the exit
// code (0 CURRENT, 77 SUPERSEDED, 78 WAITING, 2 usage or a bad name or
// token, 1 any other error), and --output json from one line.
TEST_F(CliTest, CheckTellsTheVerdictByItsExitCode) {
  AcquireStream holder(stub_.get(), OpenMsg("fenced", milliseconds(10000), "h"));
  auto granted = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(granted);
  const uint64_t token = granted->acquired().fencing_token();
  AcquireStream waiter(stub_.get(), OpenMsg("fenced", milliseconds(30000), "w"));
  ASSERT_TRUE(AwaitContenders("fenced", {"H:h", "W:w"}));
  uint64_t waiter_token = 0;
  {
    grpc::ClientContext ctx;
    v1::DescribeRequest req;
    req.set_name("fenced");
    v1::DescribeResponse d;
    ASSERT_TRUE(stub_->Describe(&ctx, req, &d).ok());
    ASSERT_EQ(d.waiters_size(), 1);
    waiter_token = d.waiters(0).fencing_token();
  }
  const std::string out = dir_ + "/check.txt";
  const std::string t = std::to_string(token), w = std::to_string(waiter_token);
  EXPECT_EQ(CliStatus({"check", "fenced", t}, out, true), 0);
  EXPECT_EQ(ReadFile(out), "CURRENT highest_holder_token=" + t + "\n");
  EXPECT_EQ(CliStatus({"check", "fenced", t, "--stale"}, out, true), 0);
  EXPECT_EQ(ReadFile(out), "CURRENT highest_holder_token=" + t + " (stale view)\n");
  EXPECT_EQ(CliStatus({"check", "fenced", w}, out, true), 78);
  EXPECT_EQ(ReadFile(out).rfind("WAITING ", 0), 0u) << ReadFile(out);
  EXPECT_EQ(CliStatus({"check", "fenced", std::to_string(token - 1)}, out, true), 77);
  EXPECT_EQ(CliStatus({"check", "other-lock", t}, out, true), 77);
  EXPECT_EQ(CliStatus({"--output", "json", "check", "fenced", t}, out, true), 0);
  EXPECT_EQ(ReadFile(out), "{\"name\":\"fenced\",\"fencing_token\":" + t +
                               ",\"verdict\":\"CURRENT\",\"highest_holder_token\":" + t +
                               ",\"linearizable\":true}\n");
  // The holder lets go: its token is superseded, the waiter's current.
  holder.SendRelease();
  ASSERT_TRUE(holder.Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(waiter.Await(AcquireEvent::ACQUIRED));
  EXPECT_EQ(CliStatus({"check", "fenced", t}, out, true), 77);
  EXPECT_EQ(ReadFile(out), "SUPERSEDED highest_holder_token=" + w + "\n");
  EXPECT_EQ(CliStatus({"check", "fenced", w}, out, true), 0);
  // Usage and bad input: 2; a replica that cannot be reached: 1.
  EXPECT_EQ(CliStatus({"check", "fenced"}, out, true), 2);
  EXPECT_EQ(CliStatus({"check", "fenced", "12ab"}, out, true), 2);
  EXPECT_EQ(CliStatus({"check", "fenced", "0"}, out, true), 2);
  EXPECT_EQ(CliStatus({"check", "", "5"}, out, true), 2);
  EXPECT_EQ(CliStatus({"--output", "json", "check", "fenced", "0"}, out, true), 2);
  EXPECT_NE(ReadFile(out).find("\"error\":\"INVALID_ARGUMENT\""), std::string::npos) << ReadFile(out);
  EXPECT_EQ(CliStatus({"--server", "127.0.0.1:1", "--rpc-timeout", "2s", "check", "fenced", t},
                      out),
            1);
}

}  // namespace
}  // namespace turnstile::testing
