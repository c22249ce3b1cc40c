// turnstile-bench end to end: a quick run against an in-process replica on
// the shared ZooKeeper prints one parseable BENCH_JSON line per workload,
// with positive numbers, turnstile/floor ratios, and W4's herd-freedom
// (about one watch notification per handoff, for every queue length), and
// compares fairly (a warm-up first, W1..W3's sides interleaved in slices,
// W4's first side alternating with N). W5 at a small size, on a pool of
// ZooKeeper sessions, survives a ZooKeeper restart while all wait (the
// bench's --w5-restart-zk: same sessions, every watch back, no hold lost),
// passes its correctness checks (each waiter granted once, in order, no
// node left) and costs ZooKeeper exactly one watch per waiter; its memory
// baseline (gRPC alone, turnstile-bare-server, with as many idle streams)
// is measured and its server stopped. With --secure-server, W1..W3 also
// run over TLS, mutual TLS and mutual TLS with policies of 10 and 10,000
// rules, each reported as a ratio to plaintext in the same run, and a side
// that is not what it says fails the run.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tests/json_reader.h"
#include "tests/test_pki.h"
#include "tests/test_support.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

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

// One run of turnstile-bench: its exit code (none if it did not exit in
// time), its stdout, and its BENCH_JSON lines by workload.
struct BenchRun {
  std::optional<int> code;
  std::string output;
  size_t json_lines = 0;
  std::map<std::string, JsonValue> by_workload;
  double seconds = 0;
};

// Runs turnstile-bench with `args`, reading its output until it exits; at
// `limit` it is killed. Every BENCH_JSON line must parse, name a workload
// once, and (with `expect_ok`) say ok. `on_line` sees each line as it comes.
BenchRun RunBench(const std::vector<std::string>& args, std::chrono::seconds limit,
                  bool expect_ok = true,
                  const std::function<void(const std::string&)>& on_line = nullptr) {
  BenchRun run;
  std::vector<std::string> argv = {TURNSTILE_BENCH_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto start = std::chrono::steady_clock::now();
  auto child = ChildProcess::Spawn(argv);
  if (!child) {
    ADD_FAILURE() << "cannot start turnstile-bench";
    return run;
  }
  const auto deadline = start + limit;
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    std::optional<std::string> line = child->ReadLine(left);
    if (!line) break;  // EOF (or the deadline)
    run.output += *line + "\n";
    if (on_line) on_line(*line);
    if (line->rfind("BENCH_JSON ", 0) != 0) continue;
    ++run.json_lines;
    const std::string text = line->substr(11);
    JsonValue j;
    JsonParser parser(text);
    if (!parser.Parse(&j) || j.kind != JsonValue::kObject ||
        j["workload"].kind != JsonValue::kString) {
      ADD_FAILURE() << "bad BENCH_JSON line (" << parser.error() << "): " << text;
      continue;
    }
    if (expect_ok) {
      EXPECT_EQ(j["ok"].number, 1) << text;
      EXPECT_EQ(j["error"].kind, JsonValue::kNull) << text;
    }
    const std::string w = j["workload"].str;
    EXPECT_TRUE(run.by_workload.emplace(w, std::move(j)).second) << "two lines for " << w;
  }
  run.code = child->Wait(milliseconds(10000));
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

TEST(BenchTest, QuickRunReportsEveryWorkloadAgainstTheFloor) {
  ZkServer& zk = SharedZkServer();
  ASSERT_TRUE(zk.running());
  ReplicaConfig config = TestConfig(zk.ConnectString(), UniqueRoot("bench"));
  // W4 --quick queues 50 waiters behind one holder, W5 --quick 1,000.
  config.max_contenders_per_lock = 2001;
  std::unique_ptr<Replica> replica = StartReplica(config);
  ASSERT_TRUE(replica);

  // Hard bound: the quick run takes ~15 s on a loaded 2-core machine.
  BenchRun run = RunBench({"--quick", "--server", replica->address(), "--zk", zk.ConnectString(),
                           "--zk-root", config.zk_root, "--zk-fsync", "off"},
                          std::chrono::seconds(120));
  const std::string& output = run.output;
  ASSERT_TRUE(run.code.has_value()) << "turnstile-bench did not exit; output:\n" << output;
  ASSERT_EQ(*run.code, 0) << output;
  EXPECT_LT(run.seconds, 60) << "the quick run must stay well under a minute";

  std::map<std::string, JsonValue>& by_workload = run.by_workload;
  ASSERT_EQ(run.json_lines, 5u) << output;
  for (const char* w : {"w1", "w2", "w3", "w4", "w5"}) {
    ASSERT_TRUE(by_workload.count(w)) << "no BENCH_JSON line for " << w << "\n" << output;
    // The fixture's ZooKeeper runs with forceSync=no; the label says so.
    EXPECT_EQ(by_workload[w]["zk_fsync"].str, "off") << w;
  }

  // Fairness: both sides warmed up (0.5 s with --quick) before the first
  // workload; W1..W3 interleave the sides in 4 slices each (0.25 s apiece),
  // so each side's measured time is still the 1 s --duration.
  EXPECT_NE(output.find("\nwarm-up: 0.5 s unmeasured"), std::string::npos) << output;
  EXPECT_EQ(output.find("warm-up, "), std::string::npos) << "the warm-up failed:\n" << output;
  EXPECT_NE(output.find("sides interleaved ABBABAAB (A turnstile, B floor) in 4 slices of 0.25 s "
                        "per side, after a 0.5 s warm-up"),
            std::string::npos)
      << output;
  for (const char* w : {"w1", "w2", "w3"}) {
    EXPECT_EQ(by_workload[w]["slices_per_side"].number, 4) << w;
    EXPECT_EQ(by_workload[w]["warmup_s"].number, 0.5) << w;
    EXPECT_EQ(by_workload[w]["duration_s"].number, 1) << w;
  }

  // W1 and W3: cycles per second and cycle latency, both sides.
  ExpectCycleWorkload(by_workload["w1"], "w1", "ops_per_s");
  EXPECT_EQ(by_workload["w1"]["clients"].number, 1);
  ExpectCycleWorkload(by_workload["w3"], "w3", "cycles_per_s");
  EXPECT_EQ(by_workload["w3"]["clients"].number, 32);
  EXPECT_EQ(by_workload["w3"]["locks"].number, 32);
  // And gRPC alone (turnstile-bare-server --grant, found next to the bench):
  // the same cycles with no lock behind them, and what each costs its
  // server and client, so that the tables show which part of turnstile's
  // cost is gRPC's own.
  for (const char* w : {"w1", "w3"}) {
    const JsonValue& g = by_workload[w]["grpc_alone"];
    ASSERT_EQ(g.kind, JsonValue::kObject) << w << "\n" << output;
    const std::string where = std::string(w) + ".grpc_alone";
    ExpectPositive(g, where, "cycles");
    ExpectPositive(g, where, w == std::string("w1") ? "ops_per_s" : "cycles_per_s");
    EXPECT_EQ(g["errors"].number, 0) << where;
    ExpectPositive(g["usage"], where, "server_cpu_ms_per_cycle");
    ExpectPositive(g["usage"], where, "client_cpu_ms_per_cycle");
  }
  EXPECT_NE(output.find("gRPC alone: server"), std::string::npos) << output;

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

  // W4: every herd size, and herd-freedom as ZooKeeper counts it. The side
  // that drains first alternates with N: turnstile at 10, the floor at 50.
  const JsonValue& herd = by_workload["w4"]["herd"];
  ASSERT_EQ(herd.kind, JsonValue::kArray);
  std::set<int> sizes;
  for (size_t k = 0; k < herd.array.size(); ++k) {
    const JsonValue& h = herd.array[k];
    const int n = static_cast<int>(h["n"].number);
    sizes.insert(n);
    const std::string where = "w4[n=" + std::to_string(n) + "]";
    EXPECT_EQ(h["first"].str, k % 2 == 0 ? "turnstile" : "floor") << where;
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

  // W5's gRPC baseline ran without --bare-server: the bench found
  // turnstile-bare-server next to itself. (No --server-pid here: the
  // replica's RSS, and so the ratio, are not measured.)
  const JsonValue& w5 = by_workload["w5"];
  ASSERT_EQ(w5["bare_grpc"].kind, JsonValue::kObject) << output;
  EXPECT_EQ(w5["bare_grpc"]["exit_status"].number, 0) << output;
  ExpectPositive(w5, "w5", "bare_grpc_rss_mb");
  EXPECT_EQ(w5["rss_ratio_to_bare_grpc"].kind, JsonValue::kNull) << output;

  // The floor's znodes are gone.
  SyncZk sync(zk.ConnectString());
  auto top = sync.Children("/");
  ASSERT_TRUE(top.ok()) << top.status();
  for (const std::string& name : *top) {
    EXPECT_NE(name.rfind("turnstile-bench-floor-", 0), 0u) << "left behind: /" << name;
  }
}


// W6: W2's handoffs with and without a /metrics scrape every 100 ms while
// 2,000 waiters wait on 100 other locks. The ratio is the bench's to
// report, not this test's to bound (timing is never asserted); the test
// checks that both sides and the scrapes ran, and that every scrape counted
// every parked waiter (the per-lock loads the engine keeps as contenders
// change: the replica here also recounts them after every operation,
// --check-invariants, and aborts on a difference).
TEST(BenchTest, ScrapeCostRunComparesHandoffsWithAndWithoutScrapes) {
  ZkServer& zk = SharedZkServer();
  ASSERT_TRUE(zk.running());
  ReplicaConfig config = TestConfig(zk.ConnectString(), UniqueRoot("bench-w6"));
  config.metrics_listen = "127.0.0.1:0";
  config.max_streams = 5000;
  std::unique_ptr<Replica> replica = StartReplica(config);
  ASSERT_TRUE(replica);
  ASSERT_GT(replica->metrics_port(), 0);
  BenchRun run = RunBench({"--quick", "--workloads", "w6", "--warmup", "0", "--server",
                           replica->address(), "--zk", zk.ConnectString(), "--zk-root",
                           config.zk_root, "--zk-fsync", "off", "--metrics",
                           "127.0.0.1:" + std::to_string(replica->metrics_port())},
                          std::chrono::seconds(120));
  const std::string& output = run.output;
  ASSERT_TRUE(run.code.has_value()) << "turnstile-bench did not exit; output:\n" << output;
  ASSERT_EQ(*run.code, 0) << output;
  ASSERT_EQ(run.json_lines, 1u) << output;
  ASSERT_TRUE(run.by_workload.count("w6")) << output;
  const JsonValue& j = run.by_workload["w6"];
  EXPECT_EQ(j["parked_waiters"].number, 2000);
  EXPECT_EQ(j["parked_locks"].number, 100);
  EXPECT_GT(j["quiet"]["handoffs"].number, 0) << output;
  EXPECT_GT(j["scraped"]["handoffs"].number, 0) << output;
  EXPECT_GT(j["scrapes"]["count"].number, 0) << output;
  // Each scrape saw the 2,000 parked waiters (and at most W2's 16 more:
  // between a release and the next grant all 16 clients may wait).
  EXPECT_GE(j["scrapes"]["fewest_waiters"].number, 2000) << output;
  EXPECT_LE(j["scrapes"]["most_waiters"].number, 2000 + 16) << output;
  EXPECT_GT(j["ratio"]["handoff_p99_ms"].number, 0) << output;
  EXPECT_NE(output.find("handoff p99 scraped / quiet"), std::string::npos) << output;
}

// W5 at a tenth of its default size against the real ZooKeeper: 2,000
// waiters (1,000 on one lock, 1,000 over 100 locks) plus 10 reference locks
// with 10 waiters, every lock first taken by one holder, on a replica
// configured as deploy/local/bench.sh's (a pool of 4 ZooKeeper sessions,
// 900 KiB of watches each, a 30 s session timeout). While all wait, the
// bench restarts ZooKeeper (--w5-restart-zk: its command asks this test,
// which owns the server, to restart it) and checks the reconnection: the
// same sessions own the contender nodes, every watch is back, every holder
// SUSPENDED is RESUMED and none LOST, no waiter is told anything but
// QUEUED. Then the bench's own checks must pass (exit 0: each contender
// granted exactly once, fencing tokens rising in grant order per lock, no
// grant before the previous holder's release, no contender node left), and
// ZooKeeper must hold exactly one watch per waiter while all wait. Before
// all that, the bench's memory baseline: turnstile-bare-server (gRPC with
// the same proto, no engine) holds as many idle streams, its RSS is read,
// and it is stopped by the bench (exit status 0 on SIGTERM) before the
// replica's part begins. Performance numbers are printed, not asserted.
TEST(BenchTest, ScaleRunSurvivesAZooKeeperRestartAndGrantsEveryWaiterOnceInOrder) {
  // A server of its own: this test restarts it.
  auto server = ZkServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ZkServer& zk = **server;
  const std::string root = UniqueRoot("bench-w5");
  ReplicaConfig config = TestConfig(zk.ConnectString(), root);
  // The big lock: 1,000 waiters + its holder.
  config.max_contenders_per_lock = 2001;
  config.zk_sessions = 4;
  config.max_watch_bytes = 900 * 1024;
  config.zk_session_timeout = milliseconds(30000);
  std::unique_ptr<Replica> replica = StartReplica(config);
  ASSERT_TRUE(replica);

  // The restart command: waits (up to 60 s) for the line this test writes
  // into a FIFO once it has restarted the server. The test holds the FIFO
  // open for reading and writing, so neither side's open blocks and the line
  // waits in the pipe if it comes first.
  const std::string fifo = zk.dir() + "/restart.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << fifo;
  const int fifo_fd = open(fifo.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fifo_fd, 0) << fifo;
  const std::string command = "test \"$(timeout 60 head -n 1 '" + fifo + "')\" = restarted";
  std::optional<absl::Status> restarted;
  auto restart = [&](const std::string& line) {
    if (restarted || line.rfind("  .. restarting ZooKeeper while all wait", 0) != 0) return;
    restarted = zk.Restart();
    const std::string reply = restarted->ok() ? "restarted\n" : "failed\n";
    EXPECT_EQ(write(fifo_fd, reply.data(), reply.size()), static_cast<ssize_t>(reply.size()));
  };

  // The replica runs in this process: its RSS and CPU are this process's.
  BenchRun run = RunBench({"--workloads", "w5", "--w5-waiters", "2000", "--w5-idle", "1s",
                           "--w5-restart-zk", command, "--server", replica->address(), "--zk",
                           zk.ConnectString(), "--zk-root", root, "--zk-fsync", "off",
                           "--server-pid", std::to_string(getpid()), "--bare-server",
                           TURNSTILE_BARE_SERVER_PATH},
                          std::chrono::seconds(150), /*expect_ok=*/true, restart);
  close(fifo_fd);
  const std::string& output = run.output;
  std::cout << output;
  ASSERT_TRUE(restarted.has_value()) << "the bench never ran its restart command:\n" << output;
  ASSERT_TRUE(restarted->ok()) << *restarted << "\n" << zk.LogTail();
  ASSERT_TRUE(run.code.has_value()) << "turnstile-bench did not exit; output:\n" << output;
  ASSERT_EQ(*run.code, 0) << "exit 3 is a failed correctness check:\n" << output;
  ASSERT_EQ(run.json_lines, 1u) << output;
  ASSERT_TRUE(run.by_workload.count("w5")) << output;
  const JsonValue& j = run.by_workload["w5"];
  EXPECT_EQ(j["zk_fsync"].str, "off");

  // The shape.
  EXPECT_EQ(j["big_waiters"].number, 1000);
  EXPECT_EQ(j["spread_locks"].number, 100);
  EXPECT_EQ(j["spread_waiters"].number, 1000);
  EXPECT_EQ(j["control_locks"].number, 10);
  EXPECT_EQ(j["control_waiters"].number, 10);
  const int waiters = 2000 + 10 * 10;
  const int holders = 1 + 100 + 10;
  EXPECT_EQ(j["waiters"].number, waiters);
  EXPECT_EQ(j["holders"].number, holders);

  // Correctness, as the bench checked it.
  const JsonValue& checks = j["checks"];
  EXPECT_EQ(checks["grants"].number, waiters + holders);
  EXPECT_EQ(checks["violations"].number, 0);
  EXPECT_EQ(checks["lock_nodes"].number, holders);
  EXPECT_EQ(checks["nodes_left"].number, 0);
  EXPECT_EQ(j["big"]["handoffs"].number, 1000);
  EXPECT_EQ(j["spread"]["handoffs"].number, 1000);
  EXPECT_EQ(j["control"]["handoffs"].number, 100);

  // One watch per waiter: each waits on exactly the node ahead of it. A
  // holder watches its own node, which is the node its first waiter
  // watches: one lock lives on one session of the pool, so that is one
  // ZooKeeper watch, and the count is the number of waiters, not of
  // contenders.
  EXPECT_EQ(j["zk_watch_delta"].number, waiters) << output;

  // The restart, as the bench saw it: the replica came back on the same 4
  // sessions (each owning the same contender nodes: none expired), every
  // watch was re-established, every hold suspended and resumed, none lost,
  // and the waiters heard nothing but QUEUED.
  const JsonValue& x = j["zk_restart"];
  ASSERT_EQ(x.kind, JsonValue::kObject) << output;
  EXPECT_EQ(x["command"].str, command);
  EXPECT_EQ(x["exit_status"].number, 0);
  EXPECT_EQ(x["checked"].number, 1);
  EXPECT_EQ(x["watches_before"].number, j["zk_watch_count"].number);
  EXPECT_EQ(x["watches_after"].number, x["watches_before"].number) << output;
  ExpectPositive(x, "w5.zk_restart", "command_s");
  // It was restarted: up for less than the time since the command began.
  ExpectPositive(x, "w5.zk_restart", "zk_uptime_s");
  EXPECT_LT(x["zk_uptime_s"].number, x["watches_back_s"].number + 1);
  ExpectPositive(x, "w5.zk_restart", "watches_back_s");
  ExpectPositive(x, "w5.zk_restart", "watches_back_after_up_s", /*allow_zero=*/true);
  EXPECT_NEAR(x["watches_back_s"].number,
              x["command_s"].number + x["watches_back_after_up_s"].number, 0.01);
  EXPECT_LT(x["watches_back_s"].number, 30) << "not within the session timeout";
  EXPECT_EQ(x["sessions_before"].number, 4);
  EXPECT_EQ(x["sessions_after"].number, 4);
  EXPECT_EQ(x["sessions_same"].number, 1);
  EXPECT_EQ(x["nodes_before"].number, waiters + holders);
  EXPECT_EQ(x["nodes_after"].number, waiters + holders);
  EXPECT_EQ(x["holders_suspended"].number, holders);
  EXPECT_EQ(x["holders_resumed"].number, holders);
  EXPECT_EQ(x["holders_lost"].number, 0);
  EXPECT_EQ(x["waiters_other_events"].number, 0);
  EXPECT_NE(output.find("across the ZooKeeper restart the same sessions, every watch back, no "
                        "hold lost, waiters told only QUEUED"),
            std::string::npos)
      << output;
  // The replica agrees: no session of its pool expired.
  EXPECT_EQ(replica->engine().stats().requeued_after_expiry, 0u);

  // Measured (values are machine-dependent: only their presence is checked).
  for (const char* key : {"queue_s", "rss_waiting_mb", "idle_s"}) {
    ExpectPositive(j, "w5", key);
  }
  ExpectPositive(j, "w5", "cpu_idle_percent", /*allow_zero=*/true);
  for (const char* group : {"big", "control", "spread"}) {
    ExpectPositive(j[group], std::string("w5.") + group, "handoffs_per_s");
    ExpectPositive(j[group], std::string("w5.") + group, "release_to_acquired_p50_ms");
  }
  ExpectPositive(j["ratio"], "w5.ratio", "handoffs_per_s");
  ExpectPositive(j["ratio"], "w5.ratio", "release_to_acquired_p50_ms");

  // The gRPC baseline: the same streams (holders and waiters) on the bare
  // server, its RSS read while they were open, the replica's over it.
  const JsonValue& bare = j["bare_grpc"];
  ASSERT_EQ(bare.kind, JsonValue::kObject) << output;
  EXPECT_EQ(bare["error"].kind, JsonValue::kNull) << output;
  EXPECT_EQ(bare["streams"].number, waiters + holders);
  ExpectPositive(bare, "w5.bare_grpc", "open_s");
  ExpectPositive(j, "w5", "bare_grpc_rss_before_mb");
  ExpectPositive(j, "w5", "bare_grpc_rss_mb");
  // 2,211 idle streams cost gRPC some memory (~16 KB each on gRPC 1.51).
  EXPECT_GT(j["bare_grpc_rss_mb"].number, j["bare_grpc_rss_before_mb"].number) << output;
  ExpectPositive(j, "w5", "bare_grpc_rss_per_waiter_kb");
  ExpectPositive(j, "w5", "rss_ratio_to_bare_grpc");
  EXPECT_NEAR(j["rss_ratio_to_bare_grpc"].number,
              j["rss_waiting_mb"].number / j["bare_grpc_rss_mb"].number,
              1e-3 * j["rss_ratio_to_bare_grpc"].number);
  EXPECT_EQ(j["rss_ratio_to_bare_grpc_target"].number, 1.15);
  EXPECT_NE(output.find("replica RSS / bare gRPC server RSS"), std::string::npos) << output;
  // The bench stopped it (SIGTERM, clean exit, reaped) before the replica's
  // part began, and it is gone.
  EXPECT_EQ(bare["exit_status"].number, 0) << output;
  const size_t stopped = output.find("server stopped, exit status 0");
  EXPECT_NE(stopped, std::string::npos) << output;
  EXPECT_LT(stopped, output.find("holders granted")) << output;
  const pid_t bare_pid = static_cast<pid_t>(bare["pid"].number);
  ASSERT_GT(bare_pid, 0);
  EXPECT_EQ(kill(bare_pid, 0), -1) << "turnstile-bare-server (pid " << bare_pid << ") still runs";
  EXPECT_EQ(errno, ESRCH);

  // No contender node left, seen independently of the bench: every lock
  // node under this test's root is empty (or already removed).
  SyncZk sync(zk.ConnectString());
  auto locks = sync.Children(root);
  ASSERT_TRUE(locks.ok()) << locks.status();
  for (const std::string& lock : *locks) {
    EXPECT_TRUE(sync.Contenders(root + "/" + lock).empty()) << "left under " << root << "/" << lock;
  }
  EXPECT_TRUE(replica->engine().serving());
}

// A violation fails the run: a node left under one of W5's lock nodes (here
// a foreign one, created while all wait) is reported, with the lock, and
// turnstile-bench exits 3.
TEST(BenchTest, ScaleRunExitsThreeWhenANodeIsLeftBehind) {
  ZkServer& zk = SharedZkServer();
  ASSERT_TRUE(zk.running());
  const std::string root = UniqueRoot("bench-w5-violation");
  std::unique_ptr<Replica> replica = StartReplica(TestConfig(zk.ConnectString(), root));
  ASSERT_TRUE(replica);

  SyncZk sync(zk.ConnectString());
  std::string planted;
  // Once every waiter is queued the lock nodes exist: put a foreign child
  // under one of them (the engine ignores it; the drain cannot remove it).
  auto plant = [&](const std::string& line) {
    if (!planted.empty() || line.rfind("  .. all QUEUED", 0) != 0) return;
    auto locks = sync.Children(root);
    if (!locks.ok() || locks->empty()) return;
    planted = root + "/" + locks->front() + "/foreign";
    EXPECT_EQ(sync.Create(planted, "", CreateMode::kPersistent), ZkCode::kOk) << planted;
  };
  BenchRun run = RunBench({"--workloads", "w5", "--w5-waiters", "200", "--w5-idle", "1s",
                           "--server", replica->address(), "--zk", zk.ConnectString(),
                           "--zk-root", root, "--zk-fsync", "off", "--server-pid",
                           std::to_string(getpid())},
                          std::chrono::seconds(120), /*expect_ok=*/false, plant);
  const std::string& output = run.output;
  std::cout << output;
  ASSERT_FALSE(planted.empty()) << "no \"all QUEUED\" progress line:\n" << output;
  ASSERT_TRUE(run.code.has_value()) << output;
  EXPECT_EQ(*run.code, 3) << output;
  const std::string lock = planted.substr(root.size() + 1, planted.rfind('/') - root.size() - 1);
  EXPECT_NE(output.find("VIOLATION: lock " + lock + ": 1 node(s) left under " + root + "/" + lock +
                        " after the drain"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("CORRECTNESS CHECKS FAILED"), std::string::npos) << output;
  ASSERT_TRUE(run.by_workload.count("w5")) << output;
  const JsonValue& j = run.by_workload["w5"];
  EXPECT_EQ(j["ok"].number, 0);
  EXPECT_EQ(j["error"].kind, JsonValue::kString);
  EXPECT_EQ(j["checks"]["nodes_left"].number, 1);
  EXPECT_EQ(sync.Delete(planted), ZkCode::kOk);
}

// --- W1..W3 over TLS, mutual TLS and a policy (issue 24) ----------------------------

// The bench's client identity, as deploy/local/bench.sh's certificate.
constexpr char kBenchIdentity[] = "spiffe://turnstile.bench/client/bench";

// A policy of `rules` rules as bench.sh writes it: rules - 1 on distinct
// prefixes for other identities, then the one granting the bench's
// identity acquire on names starting "bench-".
std::string WriteBenchPolicy(const std::string& dir, int rules) {
  const std::string path = dir + "/policy-" + std::to_string(rules) + ".json";
  std::ofstream f(path);
  f << "{\"rules\": [\n";
  char line[256];
  for (int i = 1; i < rules; ++i) {
    std::snprintf(line, sizeof(line),
                  "  {\"identities\": [\"spiffe://turnstile.bench/team-%05d/*\"], \"locks\": "
                  "[\"team-%05d/\"], \"actions\": [\"acquire\", \"describe\"]},\n",
                  i, i);
    f << line;
  }
  f << "  {\"identities\": [\"" << kBenchIdentity
    << "\"], \"locks\": [\"bench-\"], \"actions\": [\"acquire\"]}\n]}\n";
  return path;
}

// Replicas for the secure sides on the shared ZooKeeper, one per side, and
// the PKI: a server certificate for 127.0.0.1 and the bench's client
// certificate.
class SecureReplicas {
 public:
  SecureReplicas() {
    CertSpec server;
    server.cn = "localhost";
    server.san = "IP:127.0.0.1,DNS:localhost";
    server_ = pki_.Issue("server", server);
    CertSpec client;
    client.cn = "bench";
    client.san = std::string("URI:") + kBenchIdentity;
    client_ = pki_.Issue("client", client);
  }
  // A replica: plaintext, TLS, mutual TLS, or mutual TLS with a policy of
  // `rules` rules (> 0).
  Replica* Start(const std::string& root, bool tls, bool mtls, int rules = 0) {
    ReplicaConfig c = TestConfig(SharedZkServer().ConnectString(), root);
    c.tls_cert_file = c.tls_key_file = c.tls_client_ca_file = c.authz_file = "";
    if (tls) {
      c.tls_cert_file = server_.cert;
      c.tls_key_file = server_.key;
    }
    if (mtls) c.tls_client_ca_file = pki_.ca_file();
    if (rules > 0) c.authz_file = WriteBenchPolicy(pki_.dir(), rules);
    replicas_.push_back(StartReplica(c));
    return replicas_.back().get();
  }
  // A --secure-server value for `r` (this process's pid: the replicas run
  // in it).
  std::string Flag(const std::string& label, Replica* r, bool mtls, int rules = 0) const {
    std::string v = label + "=127.0.0.1:" + std::to_string(r->port()) + ",ca=" + pki_.ca_file();
    if (mtls) v += ",cert=" + client_.cert + ",key=" + client_.key;
    v += ",pid=" + std::to_string(getpid());
    if (rules > 0) v += ",rules=" + std::to_string(rules);
    return v;
  }

 private:
  TestPki pki_;
  TestPki::Files server_, client_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

// A quick run of W1..W3 with a plaintext replica and four secure ones (TLS,
// mutual TLS, mutual TLS with a 10-rule and a 10,000-rule policy): every
// side is checked to be what it says, runs cycles, and is reported as a
// ratio to plaintext; the two policies as a ratio to each other. Numbers
// are only checked to be there and positive (no speed is asserted).
TEST(BenchTest, SecureSidesReportTheirRatioToPlaintext) {
  ZkServer& zk = SharedZkServer();
  ASSERT_TRUE(zk.running());
  const std::string root = UniqueRoot("bench-secure");
  SecureReplicas pki;
  Replica* plain = pki.Start(root, false, false);
  Replica* tls = pki.Start(root, true, false);
  Replica* mtls = pki.Start(root, true, true);
  Replica* small = pki.Start(root, true, true, 10);
  Replica* large = pki.Start(root, true, true, 10000);
  ASSERT_TRUE(plain && tls && mtls && small && large);

  BenchRun run = RunBench(
      {"--quick", "--workloads", "w1,w2,w3", "--server", plain->address(), "--zk",
       zk.ConnectString(), "--zk-root", root, "--zk-fsync", "off", "--server-pid",
       std::to_string(getpid()), "--secure-server", pki.Flag("tls", tls, false),
       "--secure-server", pki.Flag("mtls", mtls, true), "--secure-server",
       pki.Flag("policy-10", small, true, 10), "--secure-server",
       pki.Flag("policy-10000", large, true, 10000)},
      std::chrono::seconds(180));
  const std::string& output = run.output;
  std::cout << output;
  ASSERT_TRUE(run.code.has_value()) << "turnstile-bench did not exit; output:\n" << output;
  ASSERT_EQ(*run.code, 0) << output;
  ASSERT_EQ(run.json_lines, 6u) << output;

  // Each side was checked before the workloads.
  EXPECT_NE(output.find("policy-10000 127.0.0.1:" + std::to_string(large->port()) +
                        ", mutual TLS, policy of 10000 rules; granted with its credentials: yes; "
                        "plaintext refused: yes; no client certificate refused: yes; outside the "
                        "policy denied: yes"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("warm-up, policy-10000: 0.1 s unmeasured"), std::string::npos) << output;

  const std::vector<std::string> labels = {"plaintext", "tls", "mtls", "policy-10",
                                           "policy-10000"};
  for (const char* w : {"w1", "w2", "w3"}) {
    const std::string name = std::string(w) + "-security";
    ASSERT_TRUE(run.by_workload.count(name)) << "no BENCH_JSON line for " << name << "\n" << output;
    const JsonValue& j = run.by_workload[name];
    const std::string rate = w == std::string("w1") ? "ops_per_s" : "cycles_per_s";
    EXPECT_EQ(j["zk_fsync"].str, "off");
    EXPECT_EQ(j["slices_per_side"].number, 4) << name;
    // Five sides, one slice each per round, every other round reversed.
    EXPECT_EQ(j["order"].str, "ABCDEEDCBAABCDEEDCBA") << name;
    ASSERT_EQ(j["side_order"].kind, JsonValue::kArray) << name;
    ASSERT_EQ(j["side_order"].array.size(), labels.size()) << name;
    for (size_t k = 0; k < labels.size(); ++k) {
      EXPECT_EQ(j["side_order"].array[k]["label"].str, labels[k]) << name;
      const JsonValue& side = j["sides"][labels[k]];
      const std::string where = name + "." + labels[k];
      ASSERT_EQ(side.kind, JsonValue::kObject) << where << "\n" << output;
      ExpectPositive(side, where, "cycles");
      ExpectPositive(side, where, rate);
      ExpectPositive(side, where, "cycle_p50_ms");
      ExpectPositive(side, where, "cycle_p99_ms");
      ExpectPositive(side, where, "turnstiled_cpu_ms_per_cycle");
      ExpectPositive(side, where, "client_cpu_ms_per_cycle");
      EXPECT_EQ(side["errors"].number, 0) << where;
      EXPECT_EQ(side["tls"].number, k > 0 ? 1 : 0) << where;
      EXPECT_EQ(side["mtls"].number, k > 1 ? 1 : 0) << where;
      EXPECT_EQ(side["policy_rules"].number, k == 3 ? 10 : k == 4 ? 10000 : 0) << where;
      const JsonValue& ratio = side["ratio_to_plaintext"];
      for (const std::string& key : {rate, std::string("cycle_p50_ms"),
                                     std::string("cycle_p99_ms"),
                                     std::string("turnstiled_cpu_ms_per_cycle")}) {
        ExpectPositive(ratio, where + ".ratio_to_plaintext", key);
      }
      EXPECT_NEAR(ratio[rate].number, side[rate].number / j["sides"]["plaintext"][rate].number,
                  1e-3 * ratio[rate].number);
      if (k == 0) {
        EXPECT_EQ(ratio[rate].number, 1) << where;
        continue;
      }
      const JsonValue& checks = side["checks"];
      EXPECT_EQ(checks["granted"].number, 1) << where;
      EXPECT_EQ(checks["plaintext_refused"].number, 1) << where;
      if (k >= 2) {
        EXPECT_EQ(checks["no_client_cert_refused"].number, 1) << where;
      } else {
        EXPECT_EQ(checks["no_client_cert_refused"].kind, JsonValue::kNull) << where;
      }
      if (k >= 3) {
        EXPECT_EQ(checks["outside_policy_denied"].number, 1) << where;
      } else {
        EXPECT_EQ(checks["outside_policy_denied"].kind, JsonValue::kNull) << where;
      }
    }
    if (w == std::string("w2")) {
      ExpectPositive(j["sides"]["policy-10000"], name, "release_to_acquired_p50_ms");
    }
    // 10,000 rules against 10.
    const JsonValue& p = j["policy_size"];
    ASSERT_EQ(p.kind, JsonValue::kObject) << name;
    EXPECT_EQ(p["more"].str, "policy-10000");
    EXPECT_EQ(p["fewer"].str, "policy-10");
    EXPECT_EQ(p["more_rules"].number, 10000);
    EXPECT_EQ(p["fewer_rules"].number, 10);
    for (const std::string& key : {rate, std::string("cycle_p50_ms"),
                                   std::string("turnstiled_cpu_ms_per_cycle")}) {
      ExpectPositive(p, name + ".policy_size", key);
    }
    EXPECT_NEAR(p[rate].number,
                j["sides"]["policy-10000"][rate].number / j["sides"]["policy-10"][rate].number,
                1e-3 * p[rate].number);
  }
  EXPECT_NE(output.find("policy of 10000 rules / of 10 rules (policy-10000 / policy-10)"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("ratio to plaintext"), std::string::npos) << output;
}

// A secure side that is not what its flag says fails the run: a TLS-only
// replica given as mutual TLS (a client without a certificate is served)
// and a mutual-TLS replica without a policy given rules=10 (a lock outside
// the policy is granted). And a --secure-server value without ca= is a
// usage error.
TEST(BenchTest, SecureSideThatIsNotWhatItSaysFailsTheRun) {
  ZkServer& zk = SharedZkServer();
  ASSERT_TRUE(zk.running());
  const std::string root = UniqueRoot("bench-secure-wrong");
  SecureReplicas pki;
  Replica* plain = pki.Start(root, false, false);
  Replica* tls = pki.Start(root, true, false);
  Replica* mtls = pki.Start(root, true, true);
  ASSERT_TRUE(plain && tls && mtls);

  BenchRun run = RunBench(
      {"--workloads", "w1", "--duration", "200ms", "--warmup", "0", "--bare-server", "",
       "--server", plain->address(), "--zk", zk.ConnectString(), "--zk-root", root,
       "--secure-server", pki.Flag("fake-mtls", tls, true), "--secure-server",
       pki.Flag("fake-policy", mtls, true, 10)},
      std::chrono::seconds(120), /*expect_ok=*/false);
  const std::string& output = run.output;
  std::cout << output;
  ASSERT_TRUE(run.code.has_value()) << output;
  EXPECT_EQ(*run.code, 1) << output;
  ASSERT_TRUE(run.by_workload.count("w1-security")) << output;
  const JsonValue& j = run.by_workload["w1-security"];
  EXPECT_EQ(j["ok"].number, 0);
  ASSERT_EQ(j["error"].kind, JsonValue::kString);
  EXPECT_NE(j["error"].str.find("fake-mtls check: a client without a certificate was not refused"),
            std::string::npos)
      << j["error"].str;
  EXPECT_NE(j["error"].str.find("fake-policy check: Acquire outside the policy: OK"),
            std::string::npos)
      << j["error"].str;
  EXPECT_EQ(j["sides"]["fake-mtls"]["checks"]["no_client_cert_refused"].number, 0);
  EXPECT_EQ(j["sides"]["fake-policy"]["checks"]["outside_policy_denied"].number, 0);
  // Two secure sides, one without a policy: no policy comparison.
  EXPECT_EQ(j["policy_size"].kind, JsonValue::kNull);

  BenchRun usage = RunBench({"--server", plain->address(), "--secure-server",
                             "tls=127.0.0.1:1,cert=a,key=b"},
                            std::chrono::seconds(30), /*expect_ok=*/false);
  ASSERT_TRUE(usage.code.has_value());
  EXPECT_EQ(*usage.code, 2) << usage.output;
  EXPECT_EQ(usage.json_lines, 0u);
}

}  // namespace
}  // namespace turnstile::testing
