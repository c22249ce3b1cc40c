// The shipped monitoring, live: Debian's `prometheus` on loopback scrapes two
// in-process replicas (on the shared real ZooKeeper) while a contended
// workload runs, with the shipped alert and recording rules loaded. Then every
// dashboard panel query and every rule expression (extracted by
// tests/check_monitoring.sh, Grafana variables filled in) is evaluated through
// Prometheus's HTTP query API, and the panels an operator reads first —
// queue depth, holders, acquire rate, wait time, locks lost, session state,
// serving, open streams — must return what the workload did.
//
// ZooKeeper's own panels (job="zookeeper") need ZooKeeper's Prometheus
// metrics provider, which Debian's zookeeper package does not ship; here they
// are evaluated (they must parse and run) and their metric names are checked
// against the real server's `mntr` keys, which come from the same metric
// registry (mntr prints "zk_<name>", the provider exports "<name>").
#include <gtest/gtest.h>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;
using Clock = std::chrono::steady_clock;

constexpr char kPrometheus[] = "/usr/bin/prometheus";

struct Series {
  std::map<std::string, std::string> labels;
  double value = NAN;
};

// One query expression from check_monitoring.sh's output.
struct Query {
  std::string kind;  // "panel" or "rule"
  std::string name;  // "<panel title>#<refId>" or the alert / record name
  std::string expr;
};

class Prometheus {
 public:
  // Starts prometheus on a free loopback port with `config` (a file in
  // `dir`), storage in dir/data; waits (up to 60 s) until /-/ready.
  static std::unique_ptr<Prometheus> Start(const std::string& dir, const std::string& config) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto p = std::make_unique<Prometheus>();
      p->port_ = FreeLoopbackPort();
      // setpriv: SIGKILL prometheus if this test process dies first.
      p->proc_ = ChildProcess::Spawn(
          {"/usr/bin/setpriv", "--pdeathsig", "KILL", "--", kPrometheus,
           "--config.file=" + config, "--storage.tsdb.path=" + dir + "/data",
           "--web.listen-address=127.0.0.1:" + std::to_string(p->port_), "--log.level=warn",
           "--storage.tsdb.retention.time=1h"});
      if (!p->proc_) continue;
      bool ready = WaitFor([&] {
        auto r = HttpGet(p->port_, "/-/ready");
        return (r.ok() && r->status == 200) || p->proc_->Wait(milliseconds(0)).has_value();
      }, milliseconds(60000), milliseconds(100));
      if (ready && !p->proc_->Wait(milliseconds(0)).has_value()) return p;
    }
    return nullptr;
  }

  // GET /api/v1/<path>; the parsed JSON body (any HTTP status: errors carry
  // {"status":"error","error":...}).
  absl::StatusOr<Struct> Api(const std::string& path) {
    auto r = HttpGet(port_, "/api/v1/" + path);
    if (!r.ok()) return r.status();
    Struct out;
    auto s = google::protobuf::util::JsonStringToMessage(r->body, &out);
    if (!s.ok()) return absl::DataLossError(absl::StrCat("bad JSON: ", r->body.substr(0, 200)));
    return out;
  }

  // An instant query; the series (a scalar result is one series without
  // labels). Error if Prometheus rejects or fails the query.
  absl::StatusOr<std::vector<Series>> Query(const std::string& expr) {
    auto body = Api("query?query=" + UrlEncode(expr));
    if (!body.ok()) return body.status();
    const auto& f = body->fields();
    if (f.at("status").string_value() != "success") {
      return absl::InvalidArgumentError(absl::StrCat(
          f.count("errorType") ? f.at("errorType").string_value() : "", ": ",
          f.count("error") ? f.at("error").string_value() : ""));
    }
    const Struct& data = f.at("data").struct_value();
    const std::string type = data.fields().at("resultType").string_value();
    const Value& result = data.fields().at("result");
    std::vector<Series> out;
    auto sample = [](const Value& pair) {
      // [ <unix time>, "<value>" ]
      return std::strtod(pair.list_value().values(1).string_value().c_str(), nullptr);
    };
    if (type == "scalar") {
      out.push_back({{}, sample(result)});
    } else if (type == "vector") {
      for (const Value& v : result.list_value().values()) {
        Series s;
        for (const auto& [k, lv] : v.struct_value().fields().at("metric").struct_value().fields()) {
          s.labels[k] = lv.string_value();
        }
        s.value = sample(v.struct_value().fields().at("value"));
        out.push_back(std::move(s));
      }
    } else {
      return absl::InvalidArgumentError("unexpected resultType " + type);
    }
    return out;
  }

  // The single value of `expr`, or NaN if it has no or several series.
  double Scalar(const std::string& expr) {
    auto r = Query(expr);
    return r.ok() && r->size() == 1 ? (*r)[0].value : NAN;
  }

  ChildProcess& process() { return *proc_; }

 private:
  int port_ = 0;
  std::unique_ptr<ChildProcess> proc_;
};

class MonitoringLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kPrometheus))
        << kPrometheus << " missing: install the Debian package 'prometheus' (deploy/debian-packages.txt)";
    char tmpl[] = "/tmp/turnstile-prom-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;

    // The queries: every panel target and rule expression of the shipped
    // files, as check_monitoring.sh extracts them.
    std::string queries = dir_ + "/queries.tsv";
    std::string cmd = absl::StrCat("bash '", SOURCE_DIR, "/tests/check_monitoring.sh' '", queries,
                                   "' > '", dir_, "/check.log' 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << ReadFile(dir_ + "/check.log");
    for (absl::string_view line : absl::StrSplit(ReadFile(queries), '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits('\t', 2));
      ASSERT_EQ(f.size(), 3u) << line;
      queries_.push_back({f[0], f[1], f[2]});
    }
    ASSERT_GT(queries_.size(), 40u);

    zk_connect_ = SharedZkServer().ConnectString();
    std::string root = UniqueRoot("prom");
    for (int i = 0; i < 2; ++i) {
      ReplicaConfig cfg = TestConfig(zk_connect_, root);
      cfg.metrics_listen = "127.0.0.1:0";
      // Issue 19: /metrics has no client authentication; only these names
      // may be lock labels (the "secret/" lock below is summed as _hidden).
      cfg.metrics_lock_prefixes = "mon-";
      cfg.replica_id = absl::StrCat("prom-", i);
      replicas_.push_back(StartReplica(cfg));
      ASSERT_TRUE(replicas_.back());
      ASSERT_GT(replicas_.back()->metrics_port(), 0);
      stubs_.push_back(NewStub(replicas_.back()->address()));
      instances_.push_back(absl::StrCat("127.0.0.1:", replicas_.back()->metrics_port()));
    }

    // The shipped prometheus.yml, pointed at this test's replicas, scraping
    // and evaluating every second; the shipped rules file next to it (the
    // config names it by a relative path; its recording group's interval
    // also 1 s). ZooKeeper targets: closed ports.
    std::string cfg = ReadFile(absl::StrCat(SOURCE_DIR, "/deploy/prometheus/prometheus.yml"));
    for (const char* from : {"turnstile-1:9464", "turnstile-2:9464", "scrape_interval: 15s",
                             "evaluation_interval: 15s", "zk1:7000", "zk2:7000", "zk3:7000"}) {
      ASSERT_NE(cfg.find(from), std::string::npos) << "prometheus.yml no longer has " << from;
    }
    cfg = absl::StrReplaceAll(cfg, {{"turnstile-1:9464", instances_[0]},
                                    {"turnstile-2:9464", instances_[1]},
                                    {"scrape_interval: 15s", "scrape_interval: 1s"},
                                    {"evaluation_interval: 15s", "evaluation_interval: 1s"},
                                    {"zk1:7000", absl::StrCat("127.0.0.1:", FreeLoopbackPort())},
                                    {"zk2:7000", absl::StrCat("127.0.0.2:", FreeLoopbackPort())},
                                    {"zk3:7000", absl::StrCat("127.0.0.3:", FreeLoopbackPort())}});
    std::ofstream(dir_ + "/prometheus.yml") << cfg;
    std::string rules = ReadFile(absl::StrCat(SOURCE_DIR, "/deploy/prometheus/turnstile-rules.yml"));
    ASSERT_NE(rules.find("interval: 15s"), std::string::npos) << "recording group interval moved";
    std::ofstream(dir_ + "/turnstile-rules.yml")
        << absl::StrReplaceAll(rules, {{"interval: 15s", "interval: 1s"}});
    prom_ = Prometheus::Start(dir_, dir_ + "/prometheus.yml");
    ASSERT_TRUE(prom_) << "prometheus did not become ready";
  }

  void TearDown() override {
    prom_.reset();
    std::string cmd = "rm -rf '" + dir_ + "'";
    (void)std::system(cmd.c_str());
  }

  const Query& Find(const std::string& kind, const std::string& name) {
    for (const Query& q : queries_) {
      if (q.kind == kind && q.name == name) return q;
    }
    ADD_FAILURE() << "no " << kind << " named " << name << " in the shipped files";
    static const Query kNone{"", "", "vector(0) == 1"};
    return kNone;
  }
  std::vector<Series> Panel(const std::string& name) {
    auto r = prom_->Query(Find("panel", name).expr);
    EXPECT_TRUE(r.ok()) << name << ": " << r.status();
    return r.ok() ? *r : std::vector<Series>{};
  }
  // label value -> value, for a panel grouped by one label.
  std::map<std::string, double> PanelBy(const std::string& name, const std::string& label) {
    std::map<std::string, double> out;
    for (const Series& s : Panel(name)) {
      auto it = s.labels.find(label);
      out[it == s.labels.end() ? "" : it->second] = s.value;
    }
    return out;
  }
  double PanelScalar(const std::string& name) {
    auto v = Panel(name);
    return v.size() == 1 ? v[0].value : NAN;
  }

  std::string dir_, zk_connect_;
  std::vector<Query> queries_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<std::unique_ptr<v1::LockService::Stub>> stubs_;
  std::vector<std::string> instances_;
  std::unique_ptr<Prometheus> prom_;
};

TEST_F(MonitoringLiveTest, DashboardAndAlertsShowTheLiveWorkload) {
  // Both replicas scraped before the workload starts, so every counter's
  // first sample in the rate windows is its zero.
  ASSERT_TRUE(WaitFor([&] {
    return prom_->Scalar("count(turnstile_acquires_total{job=\"turnstile\", result=\"acquired\"} == 0)") == 2;
  }, milliseconds(60000), milliseconds(200))) << "targets never scraped";

  auto* a = stubs_[0].get();
  auto* b = stubs_[1].get();
  const milliseconds kLong(60000);
  // 4 acquire/release cycles (acquired, immediate waits).
  for (int i = 0; i < 4; ++i) {
    AcquireStream s(a, OpenMsg("mon-quick", kLong));
    ASSERT_TRUE(s.Await(AcquireEvent::ACQUIRED));
    s.SendRelease();
    ASSERT_TRUE(s.Await(AcquireEvent::RELEASED));
  }
  // Every wait that ends does so on A (B only queues), so all of the acquire
  // counters come from one target with one set of scrape timestamps.
  // "mon-queue": a holder on A, 2 try-once (busy) and 1 timed-out wait
  // (timeout), then 3 waiters on A and 2 on B that stay queued.
  AcquireStream holder(a, OpenMsg("mon-queue", kLong));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
  for (int i = 0; i < 2; ++i) {
    AcquireStream once(a, OpenMsg("mon-queue", milliseconds(0)));
    auto st = once.AwaitEnd();
    ASSERT_TRUE(st && st->error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    AcquireStream timed(a, OpenMsg("mon-queue", milliseconds(300)));
    auto st = timed.AwaitEnd();
    ASSERT_TRUE(st && st->error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  std::vector<std::unique_ptr<AcquireStream>> waiters;
  for (auto* stub : {a, a, a, b, b}) {
    waiters.push_back(std::make_unique<AcquireStream>(stub, OpenMsg("mon-queue", kLong)));
    auto q = waiters.back()->Next();
    ASSERT_TRUE(q && q->type() == AcquireEvent::QUEUED);
  }
  // "mon-wait": a holder and one waiter, granted later (a local handoff).
  AcquireStream wait_holder(a, OpenMsg("mon-wait", kLong));
  ASSERT_TRUE(wait_holder.Await(AcquireEvent::ACQUIRED));
  const auto wait_start = Clock::now();
  AcquireStream waiter(a, OpenMsg("mon-wait", kLong));
  auto wq = waiter.Next();
  ASSERT_TRUE(wq && wq->type() == AcquireEvent::QUEUED);
  // "mon-ttl": a lease never renewed: LOST(LEASE_EXPIRED).
  {
    AcquireStream lease(a, OpenMsg("mon-ttl", kLong, "", milliseconds(500)));
    ASSERT_TRUE(lease.Await(AcquireEvent::ACQUIRED));
    auto lost = lease.Await(AcquireEvent::LOST);
    ASSERT_TRUE(lost);
    EXPECT_EQ(lost->lost().reason(), v1::Lost::LEASE_EXPIRED);
  }
  // So far: acquired 4 + 1 + 1 + 1 = 7, busy 2, timeout 1; waiting 5 + 1.

  // --- queue depth, summed across replicas -----------------------------------
  ASSERT_TRUE(WaitFor([&] {
    return PanelScalar("Waiters (all locks)#A") == 6 &&
           prom_->Scalar("sum(turnstile_acquires_total{result=\"acquired\"})") == 7 &&
           prom_->Scalar("sum(turnstile_locks_lost_total)") == 1;
  }, milliseconds(60000), milliseconds(200)))
      << "waiters " << PanelScalar("Waiters (all locks)#A");
  std::map<std::string, double> queues = PanelBy("Top wait queues by lock#A", "lock");
  EXPECT_EQ(queues["mon-queue"], 5) << "3 waiters on one replica + 2 on the other";
  EXPECT_EQ(queues["mon-wait"], 1);
  EXPECT_EQ(queues.count("mon-quick"), 0u);
  std::map<std::string, double> holders = PanelBy("Holders by lock#A", "lock");
  EXPECT_EQ(holders["mon-queue"], 1);
  EXPECT_EQ(holders["mon-wait"], 1);
  EXPECT_TRUE(WaitFor([&] {
    auto r = prom_->Query("turnstile:lock_waiters:sum");
    std::map<std::string, double> by_lock;
    if (r.ok()) for (const Series& s : *r) by_lock[s.labels.count("lock") ? s.labels.at("lock") : ""] = s.value;
    return by_lock["mon-queue"] == 5 && by_lock["mon-wait"] == 1;
  }, milliseconds(30000), milliseconds(200))) << "recording rule turnstile:lock_waiters:sum";

  // --- session state, serving, streams ------------------------------------------
  std::map<std::string, double> sessions = PanelBy("ZooKeeper session per replica#A", "instance");
  EXPECT_EQ(sessions, (std::map<std::string, double>{{instances_[0], 1}, {instances_[1], 1}}));
  EXPECT_EQ(PanelScalar("ZooKeeper sessions up#A"), 2);
  std::map<std::string, double> serving = PanelBy("Serving per replica#A", "instance");
  EXPECT_EQ(serving, (std::map<std::string, double>{{instances_[0], 1}, {instances_[1], 1}}));
  EXPECT_EQ(PanelScalar("Replicas up#A"), 2);
  EXPECT_EQ(PanelScalar("Replicas serving#A"), 2);
  std::map<std::string, double> streams;
  for (const Series& s : Panel("Open streams#A")) {
    streams[s.labels.at("instance") + " " + s.labels.at("kind")] = s.value;
  }
  // A: queue holder + 3 waiters + wait holder + its waiter; B: 2 waiters.
  EXPECT_EQ(streams[instances_[0] + " acquire"], 6);
  EXPECT_EQ(streams[instances_[1] + " acquire"], 2);
  EXPECT_EQ(streams[instances_[0] + " keepalive"], 0);

  // --- a wait of known length --------------------------------------------------
  // The waiter has waited since wait_start; hold on until it has waited at
  // least 1.5 s (the workload's hold time), then hand over.
  auto waited = Clock::now() - wait_start;
  if (waited < milliseconds(1500)) std::this_thread::sleep_for(milliseconds(1500) - waited);
  wait_holder.SendRelease();
  ASSERT_TRUE(wait_holder.Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(waiter.Await(AcquireEvent::ACQUIRED));
  waiter.SendRelease();
  ASSERT_TRUE(waiter.Await(AcquireEvent::RELEASED));
  // Now: acquired 8, busy 2, timeout 1 — 11 waits ended; 5 still queued.
  ASSERT_TRUE(WaitFor([&] {
    return prom_->Scalar("sum(turnstile_acquires_total{result=\"acquired\"})") == 8 &&
           PanelScalar("Waiters (all locks)#A") == 5;
  }, milliseconds(60000), milliseconds(200)));

  // --- acquire rate by result: in the workload's proportions -----------------
  // The counters that moved are all on A: they share scrape timestamps and
  // start from 0 inside the window, so rate ratios are exactly the ratios of
  // what happened.
  std::map<std::string, double> rate = PanelBy("Acquire rate by result#A", "result");
  EXPECT_GT(rate["acquired"], 0);
  EXPECT_NEAR(rate["acquired"] / rate["busy"], 8.0 / 2.0, 1e-6);
  EXPECT_NEAR(rate["acquired"] / rate["timeout"], 8.0 / 1.0, 1e-6);
  EXPECT_EQ(rate["cancelled"], 0);
  EXPECT_EQ(rate["failed"], 0);

  // --- wait time: p50 among the immediate grants, p99 the 1.5 s wait ----------
  // 11 waits: 9 immediate (grants and busy), one 300 ms timeout, one >= 1.5 s.
  double p50 = PanelScalar("Acquire wait time p50 / p99#A");
  double p99 = PanelScalar("Acquire wait time p50 / p99#B");
  EXPECT_LE(p50, 0.25) << "the 6th of 11 waits is an immediate one";
  EXPECT_GE(p99, 1.0) << "the 11th of 11 waits is the >= 1.5 s one (bucket 1..2.5)";
  EXPECT_LE(p99, 5.0);
  std::map<std::string, double> p99_by = PanelBy("Acquire wait time p50 / p99#C", "result");
  EXPECT_GE(p99_by["acquired"], 1.0);
  EXPECT_GE(p99_by["timeout"], 0.25);
  EXPECT_LE(p99_by["timeout"], 0.5);
  EXPECT_LE(p99_by["busy"], 0.25);
  double stat_p99 = PanelScalar("Acquire p99 wait#A");
  EXPECT_GE(stat_p99, 1.0);

  // --- hold time: 4 quick holds, the lease, the 1.5 s hold, the waiter's ------
  double hold_p99 = PanelScalar("Hold time p50 / p99#B");
  EXPECT_GE(hold_p99, 1.0) << "the wait holder held >= 1.5 s";
  EXPECT_LE(PanelScalar("Hold time p50 / p99#A"), hold_p99);

  // --- locks lost: by reason, and the alert -----------------------------------
  std::map<std::string, double> lost = PanelBy("Locks lost by reason#A", "reason");
  EXPECT_GT(lost["lease_expired"], 0);
  for (const auto& [reason, v] : lost) {
    if (reason != "lease_expired") EXPECT_EQ(v, 0) << reason;
  }
  EXPECT_GT(PanelScalar("Locks lost (1h)#A"), 0);
  std::string alert_state;
  EXPECT_TRUE(WaitFor([&] {
    auto alerts = prom_->Api("alerts");
    if (!alerts.ok()) return false;
    for (const Value& al : alerts->fields().at("data").struct_value().fields().at("alerts")
                               .list_value().values()) {
      const auto& f = al.struct_value().fields();
      if (f.at("labels").struct_value().fields().at("alertname").string_value() == "TurnstileLocksLost") {
        alert_state = f.at("state").string_value();
        return alert_state == "firing";
      }
    }
    return false;
  }, milliseconds(30000), milliseconds(200))) << "TurnstileLocksLost state: " << alert_state;

  // --- gRPC panels: the Acquire streams are counted ---------------------------
  std::map<std::string, double> grpc_codes;
  for (const Series& s : Panel("gRPC request rate by method and code#A")) {
    grpc_codes[s.labels.at("method") + " " + s.labels.at("code")] += s.value;
  }
  EXPECT_GT(grpc_codes["Acquire OK"], 0) << ::testing::PrintToString(grpc_codes);
  EXPECT_GT(grpc_codes["Acquire FAILED_PRECONDITION"], 0) << ::testing::PrintToString(grpc_codes);

  // --- issue 12: shared holders, revocations, lock-delay -----------------------
  v1::AcquireOpen shared_open = OpenMsg("mon-shared", kLong);
  shared_open.set_kind(v1::LOCK_KIND_SHARED);
  AcquireStream reader1(a, shared_open), reader2(a, shared_open);
  ASSERT_TRUE(reader1.Await(AcquireEvent::ACQUIRED));
  auto reader2_acq = reader2.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(reader2_acq);
  {
    grpc::ClientContext ctx;
    v1::RevokeRequest req;
    req.set_lease_id(reader2_acq->acquired().lease_id());
    req.set_requester("monitoring");
    v1::RevokeResponse resp;
    ASSERT_TRUE(b->Revoke(&ctx, req, &resp).ok());  // written by B, told on A
  }
  ASSERT_TRUE(reader2.Await(AcquireEvent::REVOKE_REQUESTED));
  v1::AcquireOpen delay_open = OpenMsg("mon-delay", kLong, "", milliseconds(500));
  delay_open.mutable_lock_delay()->set_seconds(60);
  AcquireStream delayed(a, delay_open);
  ASSERT_TRUE(delayed.Await(AcquireEvent::ACQUIRED));
  AcquireStream behind_delay(a, OpenMsg("mon-delay", kLong));
  ASSERT_TRUE(behind_delay.Await(AcquireEvent::QUEUED));
  ASSERT_TRUE(delayed.Await(AcquireEvent::LOST));  // lease expired: A puts the lock in delay
  // Issue 21: a semaphore of 3 with 2 holders (on both replicas): the
  // holder panel shows its holders and its N.
  v1::AcquireOpen sem_open = OpenMsg("mon-sem", kLong);
  sem_open.set_kind(v1::LOCK_KIND_SEMAPHORE);
  sem_open.set_max_holders(3);
  AcquireStream permit1(a, sem_open), permit2(b, sem_open);
  ASSERT_TRUE(permit1.Await(AcquireEvent::ACQUIRED));
  ASSERT_TRUE(permit2.Await(AcquireEvent::ACQUIRED));
  std::map<std::string, double> holders2, permits, in_delay, revocations;
  EXPECT_TRUE(WaitFor([&] {
    holders2 = PanelBy("Holders by lock#A", "lock");
    permits = PanelBy("Holders by lock#B", "lock");
    in_delay = PanelBy("Locks in lock-delay#A", "instance");
    return holders2["mon-shared"] == 2 && holders2["mon-sem"] == 2 && permits["mon-sem"] == 3 &&
           in_delay[instances_[0]] == 1 &&
           prom_->Scalar("sum(turnstile_revocations_total{step=\"requested\"})") == 1 &&
           prom_->Scalar("sum(turnstile_revocations_total{step=\"delivered\"})") == 1;
  }, milliseconds(60000), milliseconds(200)))
      << "shared holders " << holders2["mon-shared"] << ", semaphore holders "
      << holders2["mon-sem"] << " of " << permits["mon-sem"] << ", in delay "
      << in_delay[instances_[0]];
  EXPECT_EQ(in_delay[instances_[1]], 0);
  revocations = PanelBy("Revocations by step#A", "step");
  EXPECT_GT(revocations["requested"], 0);
  EXPECT_GT(revocations["delivered"], 0);

  // --- issue 19: a lock outside --metrics-lock-prefixes ----------------------
  // Its holder (on A) and waiter (on B) are counted under lock="_hidden";
  // its name is in no series Prometheus scraped.
  AcquireStream secret_holder(a, OpenMsg("secret/payroll", kLong));
  ASSERT_TRUE(secret_holder.Await(AcquireEvent::ACQUIRED));
  AcquireStream secret_waiter(b, OpenMsg("secret/payroll", kLong));
  ASSERT_TRUE(secret_waiter.Await(AcquireEvent::QUEUED));
  std::map<std::string, double> hidden_holders, hidden_waiters;
  EXPECT_TRUE(WaitFor([&] {
    hidden_holders = PanelBy("Holders by lock#A", "lock");
    hidden_waiters = PanelBy("Top wait queues by lock#A", "lock");
    return hidden_holders["_hidden"] == 1 && hidden_waiters["_hidden"] == 1;
  }, milliseconds(60000), milliseconds(200)))
      << "hidden holders " << hidden_holders["_hidden"] << ", waiters " << hidden_waiters["_hidden"];
  EXPECT_EQ(hidden_holders.count("secret/payroll"), 0u);
  EXPECT_EQ(hidden_waiters.count("secret/payroll"), 0u);
  {
    auto leaked = prom_->Query("{lock=~\"secret.*\"}");
    ASSERT_TRUE(leaked.ok()) << leaked.status();
    EXPECT_TRUE(leaked->empty()) << leaked->size() << " series carry the secret lock's name";
    auto values = prom_->Api("label/lock/values");
    ASSERT_TRUE(values.ok()) << values.status();
    for (const Value& v : values->fields().at("data").list_value().values()) {
      EXPECT_EQ(v.string_value().rfind("secret", 0), std::string::npos) << v.string_value();
    }
  }

  // --- every query and every rule: parses and evaluates -----------------------
  int evaluated = 0, non_empty = 0;
  for (const Query& q : queries_) {
    auto r = prom_->Query(q.expr);
    EXPECT_TRUE(r.ok()) << q.kind << " " << q.name << ": " << q.expr << ": " << r.status();
    if (!r.ok()) continue;
    ++evaluated;
    if (!r->empty()) ++non_empty;
    // Every turnstile panel has data now (ZooKeeper ones need ZooKeeper's
    // provider; "errors" panels may be all-zero but still return series;
    // quota refusals have a series only once a quota of a policy file
    // refused something, which quota_test shows).
    bool zk_job = q.expr.find("job=\"zookeeper\"") != std::string::npos;
    if (q.kind == "panel" && !zk_job && q.name.rfind("Handoff", 0) != 0 &&
        q.name.rfind("Quota", 0) != 0) {
      EXPECT_FALSE(r->empty()) << "panel " << q.name << " returned nothing: " << q.expr;
    }
  }
  EXPECT_EQ(evaluated, static_cast<int>(queries_.size()));

  // The rules Prometheus loaded: all of the file's, each evaluated healthy.
  int rules = 0, healthy = 0;
  auto rules_api = prom_->Api("rules");
  ASSERT_TRUE(rules_api.ok()) << rules_api.status();
  for (const Value& g : rules_api->fields().at("data").struct_value().fields().at("groups")
                            .list_value().values()) {
    for (const Value& r : g.struct_value().fields().at("rules").list_value().values()) {
      const auto& f = r.struct_value().fields();
      ++rules;
      if (f.at("health").string_value() == "ok") ++healthy;
      else ADD_FAILURE() << f.at("name").string_value() << ": " << f.at("health").string_value()
                         << " " << (f.count("lastError") ? f.at("lastError").string_value() : "");
    }
  }
  int rule_queries = 0;
  for (const Query& q : queries_) rule_queries += q.kind == "rule";
  EXPECT_EQ(rules, rule_queries);
  EXPECT_EQ(healthy, rules);

  // ZooKeeper panel metric names exist on a real ZooKeeper (mntr: zk_<name>).
  auto mntr = SharedZkServer().Mntr();
  ASSERT_TRUE(mntr.ok()) << mntr.status();
  std::set<std::string> zk_names;
  std::regex zk_metric(R"(([a-z_]+)\{job="zookeeper"\})");
  for (const Query& q : queries_) {
    for (std::sregex_iterator it(q.expr.begin(), q.expr.end(), zk_metric), end; it != end; ++it) {
      if ((*it)[1] != "up") zk_names.insert((*it)[1]);
    }
  }
  EXPECT_GE(zk_names.size(), 4u);
  for (const std::string& n : zk_names) {
    EXPECT_EQ(mntr->count("zk_" + n), 1u) << "ZooKeeper has no metric " << n;
  }

  std::printf("monitoring live: %d expressions evaluated (%d returned series), %d rules healthy, "
              "ZooKeeper names checked: %zu; p50 %.4f s, p99 %.3f s, rate acquired %.4f/s\n",
              evaluated, non_empty, healthy, zk_names.size(), p50, p99, rate["acquired"]);
}

}  // namespace
}  // namespace turnstile::testing
