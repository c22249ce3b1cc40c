// Per-identity quotas of the policy file (protos/turnstile/v1/authz.proto,
// message Quota): the pure pieces (parsing, which quota an identity has,
// the counts and the opens bucket), then real replicas on the shared real
// ZooKeeper: a flood by one identity beside another identity's handoffs
// (mutual TLS), a reload below current use, and a replica without mutual
// TLS counting callers by address, with its audit line and metric.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/common/lock_name.h"
#include "client/lib/tls.h"
#include "server/replica.h"
#include "server/rpc/authz.h"
#include "server/rpc/lock_service.h"
#include "server/rpc/quota.h"
#include "tests/test_pki.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

const QuotaLimits* QuotaFor(const AuthzPolicy& p, const std::string& identity) {
  return p.quotas().For(identity);
}

std::shared_ptr<const AuthzPolicy> MustParse(const std::string& json) {
  auto p = AuthzPolicy::Parse(json);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : nullptr;
}

TEST(QuotaSetTest, AnIdentityGetsItsMostSpecificQuotaElseTheDefault) {
  auto p = MustParse(R"({"quotas": [
      {"name": "team", "identities": ["spiffe://a/team/*"], "max_streams": 10},
      {"name": "job", "identities": ["spiffe://a/team/job*"], "max_streams": 5},
      {"name": "exact", "identities": ["spiffe://a/team/jobx"], "max_streams": 1},
      {"name": "tie", "identities": ["spiffe://a/team/job*"], "max_streams": 7}],
    "default_quota": {"max_streams": 100, "opens_per_second": 2.5}})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->quotas().size(), 5u);
  EXPECT_EQ(QuotaFor(*p, "spiffe://a/team/web")->name, "team");
  EXPECT_EQ(QuotaFor(*p, "spiffe://a/team/job1")->name, "job");  // more literal; first on a tie
  EXPECT_EQ(QuotaFor(*p, "spiffe://a/team/jobx")->name, "exact");
  const QuotaLimits* d = QuotaFor(*p, "10.0.0.7");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->name, "default");
  EXPECT_EQ(d->open_burst, 3u);  // max(1, ceil(rate)) when unset
  EXPECT_EQ(QuotaFor(*MustParse(R"({"quotas": []})"), "anyone"), nullptr);
}

TEST(QuotaSetTest, ABadQuotaNamesItsPlaceAndEchoesNothingElse) {
  struct Case {
    const char* json;
    const char* says;
  } cases[] = {
      {R"({"quotas": [{"name": "ok", "identities": ["x"]}, {"identities": ["y"]}]})",
       "quota 2: \"name\" is empty"},
      {R"({"quotas": [{"name": "a b", "identities": ["x"]}]})", "quota 1: \"name\" may hold only"},
      {R"({"quotas": [{"name": "q", "identities": []}]})", "quota 1 (q): \"identities\" is empty"},
      {R"({"quotas": [{"name": "q", "identities": [""]}]})", "quota 1 (q): an empty identity"},
      {R"({"quotas": [{"name": "q", "identities": ["x"]}, {"name": "q", "identities": ["y"]}]})",
       "quota 2: the name \"q\" is used twice"},
      {R"({"quotas": [{"name": "q", "identities": ["x"], "max_streams": 2, "max_contenders": 3}]})",
       "quota 1 (q): \"max_contenders\" is above \"max_streams\""},
      {R"({"quotas": [{"name": "q", "identities": ["x"], "opens_per_second": -1}]})",
       "quota 1 (q): \"opens_per_second\" must be"},
      {R"({"quotas": [{"name": "q", "identities": ["x"], "open_burst": 5}]})",
       "quota 1 (q): \"open_burst\" needs"},
      {R"({"default_quota": {"identities": ["x"]}})", "default_quota (default): the default quota takes no"},
      {R"({"quotas": [{"name": "q", "identities": ["x"], "max_stream": 2}]})",
       "an unknown field in quotas[0]"},
  };
  for (const Case& c : cases) {
    auto p = AuthzPolicy::Parse(c.json);
    ASSERT_FALSE(p.ok()) << c.json;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(p.status().message(), c.says))
        << c.json << "\n  said: " << p.status().message();
  }
}

TEST(QuotaTrackerTest, CountsStreamsContendersAndAnOpensBucket) {
  QuotaLimits q;
  q.name = "q";
  q.max_streams = 3;
  q.max_contenders = 2;
  q.opens_per_second = 10;
  q.open_burst = 4;
  QuotaTracker t;
  absl::Time now = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(t.OpenStream(&q, "a", now));
  EXPECT_FALSE(t.OpenStream(&q, "a", now));
  EXPECT_FALSE(t.OpenStream(&q, "a", now));
  auto r = t.OpenStream(&q, "a", now);  // a 4th stream: over max_streams
  ASSERT_TRUE(r);
  EXPECT_EQ(r->limit, QuotaLimit::kStreams);
  EXPECT_EQ(r->status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(r->status.message(), "quota \"q\" allows identity \"a\" at most 3 open streams"))
      << r->status;
  EXPECT_TRUE(r->audit);
  // Another identity has counts of its own.
  EXPECT_FALSE(t.OpenStream(&q, "b", now));
  // Contenders.
  EXPECT_FALSE(t.OpenContender(&q, "a", now));
  EXPECT_FALSE(t.OpenContender(&q, "a", now));
  auto c = t.OpenContender(&q, "a", now);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->limit, QuotaLimit::kContenders);
  EXPECT_FALSE(c->audit);  // within a second of the last audit line
  EXPECT_EQ(t.UsageOf("a").streams, 3u);
  EXPECT_EQ(t.UsageOf("a").contenders, 2u);
  t.CloseContender("a", now);
  t.CloseStream("a", now);  // 2 streams, 1 contender
  // The bucket: burst 4, three taken (a refused open takes none).
  EXPECT_FALSE(t.OpenStream(&q, "a", now));  // its last token; 3 streams
  auto o = t.OpenStream(&q, "a", now);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->limit, QuotaLimit::kOpens);
  EXPECT_FALSE(o->audit);
  // Refilled a second later; the next audit line counts the two refusals
  // it did not write.
  now += absl::Milliseconds(1100);
  auto late = t.OpenStream(&q, "a", now);
  ASSERT_TRUE(late);
  EXPECT_EQ(late->limit, QuotaLimit::kStreams);
  EXPECT_TRUE(late->audit);
  EXPECT_EQ(late->unaudited, 2u);
  // Everything closed, buckets full and no refusal this second: forgotten.
  now += absl::Seconds(2);
  for (int i = 0; i < 3; ++i) t.CloseStream("a", now);
  t.CloseContender("a", now);
  t.CloseStream("b", now);
  EXPECT_EQ(t.tracked(), 0u);
  // No quota: only counted.
  EXPECT_FALSE(t.OpenStream(nullptr, "c", now));
  EXPECT_EQ(t.UsageOf("c").streams, 1u);
}

TEST(QuotaTrackerTest, IdentitiesThatUseNothingAreForgotten) {
  QuotaLimits q;
  q.name = "q";
  q.opens_per_second = 1000;
  q.open_burst = 1000;
  QuotaTracker t;
  absl::Time now = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 10000; ++i) {
    const std::string who = absl::StrCat("10.0.", i / 256, ".", i % 256);
    ASSERT_FALSE(t.OpenStream(&q, who, now));
    t.CloseStream(who, now + absl::Seconds(1));
  }
  EXPECT_LT(t.tracked(), 10u);
}

TEST(QuotaIdentityTest, TheVerifiedIdentityElseTheCallersAddress) {
  EXPECT_EQ(QuotaIdentity("spiffe://a/b", "ipv4:127.0.0.1:5000"), "spiffe://a/b");
  EXPECT_EQ(QuotaIdentity("", "ipv4:10.1.2.3:5000"), "10.1.2.3");
  EXPECT_EQ(QuotaIdentity("", "ipv6:[::1]:5000"), "::1");
  EXPECT_EQ(QuotaIdentity("", "unix:/run/t.sock"), "unix:/run/t.sock");
}

// ------------------------------------------------------------ real replicas

constexpr char kFlooder[] = "spiffe://quota.test/team/batch/runaway";
constexpr char kSteady[] = "spiffe://quota.test/team/web/api";
// With mutual TLS the rules still decide (deny by default): allow all.
constexpr char kAllowAll[] = R"({"identities": ["*"], "locks": [""], "admin": true})";

class QuotaReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    connect_ = SharedZkServer().ConnectString();
    server_ = pki_.IssueServer();
    policy_file_ = pki_.dir() + "/policy.json";
    root_ = UniqueRoot("quota");
  }

  void WritePolicy(const std::string& text) { ASSERT_TRUE(ReplaceFile(policy_file_, text)); }

  void StartMtlsReplica() {
    ReplicaConfig cfg = TestConfig(connect_, root_);
    cfg.tls_cert_file = server_.cert;
    cfg.tls_key_file = server_.key;
    cfg.tls_client_ca_file = pki_.ca_file();
    cfg.authz_file = policy_file_;
    cfg.metrics_listen = "127.0.0.1:0";
    cfg.max_streams_per_connection = max_streams_per_connection_;
    if (refusal_delay_) cfg.quota_refusal_delay = *refusal_delay_;
    if (const char* d = std::getenv("QUOTA_TEST_REFUSAL_DELAY_MS")) {
      cfg.quota_refusal_delay = milliseconds(std::atoi(d));
    }
    refusal_delay_ = cfg.quota_refusal_delay;
    replica_ = StartReplica(cfg);
    ASSERT_TRUE(replica_);
    address_ = absl::StrCat("127.0.0.1:", replica_->port());
  }

  TestPki::Files IssueClient(const std::string& identity) {
    return pki_.IssueClient(absl::StrCat("client", ++clients_), identity);
  }

  std::unique_ptr<v1::LockService::Stub> StubAs(const std::string& identity) {
    auto f = IssueClient(identity);
    auto creds = client::MakeChannelCredentials({pki_.ca_file(), f.cert, f.key});
    EXPECT_TRUE(creds.ok()) << creds.status();
    // A channel of its own per stub: the flood's streams do not share the
    // steady clients' connection.
    grpc::ChannelArguments args;
    args.SetInt("turnstile.quota_test.channel", clients_);
    return v1::LockService::NewStub(grpc::CreateCustomChannel(address_, *creds, args));
  }

  // Contender nodes in ZooKeeper on locks whose names start with `prefix`.
  // Locks in ZooKeeper whose names start with `prefix` (one read).
  size_t LocksUnder(SyncZk& zk, const std::string& prefix) {
    auto locks = zk.Children(root_);
    if (!locks.ok()) return 0;
    const std::string encoded = EncodeLockName(prefix);
    return static_cast<size_t>(std::count_if(locks->begin(), locks->end(), [&](const std::string& l) {
      return absl::StartsWith(l, encoded);
    }));
  }
  size_t NodesUnder(SyncZk& zk, const std::string& prefix) {
    auto locks = zk.Children(root_);
    if (!locks.ok()) return 0;
    const std::string encoded = EncodeLockName(prefix);
    size_t n = 0;
    for (const std::string& lock : *locks) {
      if (absl::StartsWith(lock, encoded)) n += zk.Contenders(root_ + "/" + lock).size();
    }
    return n;
  }

  TestPki pki_;
  TestPki::Files server_;
  int clients_ = 0;
  int64_t max_streams_per_connection_ = 0;
  std::optional<milliseconds> refusal_delay_;  // unset: the replica's default (then: what it got)
  std::string connect_, policy_file_, root_, address_;
  std::unique_ptr<Replica> replica_;
};

// Handoff latencies of `clients` taking turns on one lock, while `go`:
// from one holder's release to the next holder's ACQUIRED.
struct Handoffs {
  std::vector<double> us;
  int exhausted = 0;  // RESOURCE_EXHAUSTED seen by these clients
  int failures = 0;   // any other unexpected end
  std::string first_failure;
  int unavailable = 0;  // retried
};

// CPU seconds (user + system) of this process's thread named `name`.
double ThreadCpuSeconds(const std::string& name) {
  double total = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string c;
    std::getline(comm, c);
    if (c != name) continue;
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // Fields after the ")" ending the name: state is field 3, utime 14, stime 15.
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    total += (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return total;
}

double P99(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(v.size() * 0.99))];
}

// A stream that ends UNAVAILABLE (the replica's ZooKeeper session in
// doubt for a moment: the documented "retry" answer) is counted apart and
// tried again once `serving` says the replica serves again.
Handoffs RunSteady(const std::vector<v1::LockService::Stub*>& stubs, const std::string& lock,
                   int min_cycles, const std::function<bool()>& more,
                   const std::function<bool()>& serving) {
  std::mutex mu;
  Handoffs out;
  std::atomic<int64_t> released_at_ns{0};  // the last holder's release, steady clock
  std::atomic<int> cycles{0};
  std::vector<std::thread> threads;
  for (v1::LockService::Stub* stub : stubs) {
    threads.emplace_back([&, stub] {
      while (cycles.load() < min_cycles || more()) {
        AcquireStream s(stub, OpenMsg(lock, milliseconds(20000)));
        auto got = s.Await(AcquireEvent::ACQUIRED, milliseconds(30000));
        if (!got) {
          auto end = s.AwaitEnd(milliseconds(5000));
          if (end && end->error_code() == grpc::StatusCode::UNAVAILABLE) {
            {
              std::lock_guard<std::mutex> l(mu);
              if (++out.unavailable > 1000) return;
            }
            WaitFor(serving, milliseconds(20000));
            continue;
          }
          std::lock_guard<std::mutex> l(mu);
          if (end && end->error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
            ++out.exhausted;
          } else {
            ++out.failures;
          }
          if (out.first_failure.empty()) {
            out.first_failure = !end ? "no end within 5 s"
                                     : absl::StrCat(end->error_code(), ": ", end->error_message());
          }
          if (out.failures + out.exhausted > 20) return;
          continue;
        }
        const int64_t now = steady_clock::now().time_since_epoch().count();
        const int64_t prev = released_at_ns.exchange(0);
        if (prev != 0) {
          std::lock_guard<std::mutex> l(mu);
          out.us.push_back(static_cast<double>(now - prev) / 1000.0);
        }
        cycles.fetch_add(1);
        released_at_ns.store(steady_clock::now().time_since_epoch().count());
        s.SendRelease();
        s.AwaitEnd(milliseconds(10000));
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Must show 1: identity A opens 10,000 streams as fast as it can against a
// quota of 100 streams and 200 opens per second, while identity B's 16
// clients take turns on one lock. A is refused beyond its quota, ZooKeeper
// never holds more than 100 of A's nodes, B is never refused.
//
// The replicas run with default flags and a policy holding a default_quota:
// the per-connection stream cap is then derived from the quotas (the
// largest max_streams, 100, plus 28), and each refusal is answered after
// the default --quota-refusal-delay holding its stream slot, so A's
// connection opens at most 28 per delay. (Without either, B's p99 rose 3-6x
// in this test; with the cap alone, 1.7-2.4x.)
//
// Each round measures B alone, then B while A floods B's replica, and B
// while A floods another replica of the same machine and cluster (the
// control: what the flood costs B through the two shared cores and
// ZooKeeper alone), the two floods in rotating order. B's handoff p99
// during each flood over its p99 alone is printed (reported, not asserted:
// the machine is shared). QUOTA_TEST_ROUNDS sets the rounds (default 1).
TEST_F(QuotaReplicaTest, AFloodByOneIdentityIsRefusedAndOthersAreNotStarved) {
  WritePolicy(absl::StrCat(R"({"rules": [{"identities": ["*"], "locks": [""], "admin": true}],)"
                           R"( "quotas": [{"name": "runaway-batch", "identities": [")", kFlooder,
                           R"("], "max_streams": 100, "opens_per_second": 200}],)"
                           R"( "default_quota": {"name": "everyone", "max_streams": 64}})"));
  max_streams_per_connection_ = ReplicaConfig::kAutoStreamsPerConnection;
  if (const char* cap = std::getenv("QUOTA_TEST_CONN_CAP")) max_streams_per_connection_ = std::atoi(cap);
  StartMtlsReplica();
  if (max_streams_per_connection_ == ReplicaConfig::kAutoStreamsPerConnection) {
    EXPECT_EQ(replica_->per_connection_stream_cap(), 100 + kConnectionStreamHeadroom);
  }
  const int64_t cap = replica_->per_connection_stream_cap();
  // The control's replica: the same flags, cluster and policy.
  std::unique_ptr<Replica> control;
  {
    ReplicaConfig cfg = replica_->config();
    cfg.listen = "127.0.0.1:0";
    cfg.replica_id = "";
    cfg.metrics_listen = "";
    auto r = Replica::Start(cfg);
    ASSERT_TRUE(r.ok()) << r.status();
    control = std::move(*r);
  }
  const std::string control_address = absl::StrCat("127.0.0.1:", control->port());
  ASSERT_TRUE(WaitFor([&] { return control->engine().serving(); }, milliseconds(20000)));
  int rounds = 1;
  if (const char* r = std::getenv("QUOTA_TEST_ROUNDS")) rounds = std::max(1, std::atoi(r));

  std::vector<std::unique_ptr<v1::LockService::Stub>> steady;
  std::vector<v1::LockService::Stub*> steady_ptrs;
  for (int i = 0; i < 16; ++i) {
    steady.push_back(StubAs(kSteady));
    steady_ptrs.push_back(steady.back().get());
  }
  const TestPki::Files flooder = IssueClient(kFlooder);
  const std::string lock = "quota-steady/one-lock";

  // A's locks in ZooKeeper, listed every 25 ms (one read; a refused open
  // that reached ZooKeeper would add a lock, each of A's opens names its
  // own), and their contender nodes every second, until told to stop:
  // from before B's first phase, so that all of B's phases share this load
  // on ZooKeeper and the two cores (listing every lock's nodes every 25 ms
  // made 4,000 reads a second). Each flood names its locks under a prefix
  // of its own: the empty lock nodes an earlier flood's holds left stay
  // until ZooKeeper reaps them.
  SyncZk zk(connect_);
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool flooding = true;
  std::string prefix = "quota-flood-0/";  // the current flood's (under stop_mu)
  std::atomic<size_t> most_nodes{0}, most_locks{0};
  auto note_most = [](std::atomic<size_t>& most, size_t n) {
    size_t m = most.load();
    while (n > m && !most.compare_exchange_weak(m, n)) {
    }
  };
  std::thread watcher([&] {
    std::unique_lock<std::mutex> l(stop_mu);
    for (int sample = 0; flooding; ++sample) {
      const std::string now_prefix = prefix;
      l.unlock();
      note_most(most_locks, LocksUnder(zk, now_prefix));
      if (sample % 40 == 0) note_most(most_nodes, NodesUnder(zk, now_prefix));
      l.lock();
      stop_cv.wait_for(l, milliseconds(25), [&] { return !flooding; });
    }
  });
  auto stop_watcher = absl::MakeCleanup([&] {
    {
      std::lock_guard<std::mutex> l(stop_mu);
      flooding = false;
    }
    stop_cv.notify_all();
    watcher.join();
  });
  auto serving = [this] { return replica_->engine().serving(); };
  // B's first 100 cycles unmeasured (the 16 connections' handshakes, the
  // first streams).
  Handoffs warm = RunSteady(steady_ptrs, lock, 100, [] { return false; }, serving);
  ASSERT_EQ(warm.failures, 0) << warm.first_failure;

  // One flood of A at `address` (from a process of its own at the lowest
  // CPU priority: A runs elsewhere in production; here it shares two cores
  // with the replicas and B, and its own client work must not be what B
  // measures), B measured meanwhile; checks A's outcome. B's p99 during it.
  int floods = 0;
  auto flood = [&](const std::string& address, const char* what) -> double {
    const std::string flood_prefix = absl::StrCat("quota-flood-", ++floods, "/");
    {
      std::lock_guard<std::mutex> l(stop_mu);
      prefix = flood_prefix;
    }
    const auto flood_start = steady_clock::now();
    auto child = ChildProcess::Spawn(
        {"/bin/sh", "-c",
         absl::StrCat("TURNSTILE_TLS_CA_FILE='", pki_.ca_file(), "' TURNSTILE_TLS_CERT_FILE='",
                      flooder.cert, "' TURNSTILE_TLS_KEY_FILE='", flooder.key,
                      "' exec nice -n 19 '", TestBinary("quota_flood_child"), "' ", address,
                      " 10000 ", flood_prefix, " 2>&1")});
    EXPECT_TRUE(child);
    if (!child) return 0;
    std::atomic<bool> flood_done{false};
    std::optional<std::string> report;
    std::thread reader([&] {
      report = child->AwaitLine("flood ", milliseconds(240000));
      flood_done = true;
    });
    Handoffs during =
        RunSteady(steady_ptrs, lock, 300, [&] { return !flood_done.load(); }, serving);
    reader.join();
    const double flood_s =
        std::chrono::duration<double>(steady_clock::now() - flood_start).count();
    EXPECT_TRUE(report) << what << ": the flood did not finish";
    if (!report) return 0;
    auto field = [&](const std::string& key) -> std::string {
      const size_t at = report->find(" " + key + "=");
      if (at == std::string::npos) return "";
      const size_t from = at + key.size() + 2;
      if (key == "refusal") return report->substr(from);
      return report->substr(from, report->find(' ', from) - from);
    };
    const int opened = std::atoi(field("opened").c_str());
    const int acquired = std::atoi(field("held").c_str());
    const int exhausted = std::atoi(field("refused").c_str());
    const int other = std::atoi(field("other").c_str());
    const size_t nodes_now = NodesUnder(zk, flood_prefix);
    std::printf("%s: %d streams opened in %s s (B measured for %.2f s): %d held, %d refused, "
                "%d other\n",
                what, opened, field("seconds").c_str(), flood_s, acquired, exhausted, other);
    // The refusal delay held A to its connection's free streams per delay:
    // with 100 of its `cap` streams held, 9,900 refusals of at least the
    // delay each, cap - 100 at a time, cannot take less than that many
    // delays.
    const double a_seconds = std::atof(field("seconds").c_str());
    if (cap > 100 && refusal_delay_->count() > 0) {
      const double floor_s = 9900.0 / static_cast<double>(cap - 100) *
                             static_cast<double>(refusal_delay_->count()) / 1000.0;
      std::printf("%s: A's flood %.2f s; the refusal delay's floor %.2f s\n", what, a_seconds,
                  floor_s);
      EXPECT_GE(a_seconds, 0.9 * floor_s) << what << ": A's refusals did not wait the delay";
    }
    EXPECT_EQ(opened, 10000) << what;
    EXPECT_EQ(acquired, 100) << what << ": A holds exactly its quota of streams";
    EXPECT_EQ(exhausted, 9900) << what;
    EXPECT_EQ(other, 0) << what;
    EXPECT_EQ(nodes_now, 100u) << what;
    EXPECT_TRUE(absl::StrContains(field("refusal"),
                                  absl::StrCat("quota \"runaway-batch\" allows identity \"",
                                               kFlooder, "\" at most 100 open streams")))
        << what << ": " << field("refusal");
    EXPECT_EQ(during.exhausted, 0) << what << ": B was refused: " << during.first_failure;
    EXPECT_EQ(during.failures, 0) << what << ": " << during.first_failure;
    EXPECT_GE(during.us.size(), 100u) << what;
    // A's 100 holds end with its process; the next phase starts without.
    child->Signal(SIGKILL);
    child->Wait(milliseconds(20000));
    EXPECT_TRUE(WaitFor([&] { return NodesUnder(zk, flood_prefix) == 0; }, milliseconds(30000)))
        << what << ": A's nodes outlived its process";
    std::printf("%s: B's handoff p99 %.0f us (%zu handoffs)\n", what, P99(during.us),
                during.us.size());
    return P99(during.us);
  };

  std::vector<double> own_ratios, control_ratios;
  for (int round = 0; round < rounds; ++round) {
    Handoffs alone = RunSteady(steady_ptrs, lock, 2000, [] { return false; }, serving);
    ASSERT_EQ(alone.failures, 0) << alone.first_failure;
    ASSERT_EQ(alone.exhausted, 0) << alone.first_failure;
    const double p99_alone = P99(alone.us);
    ASSERT_GT(p99_alone, 0);
    double own = 0, other = 0;
    if (round % 2 == 0) {
      own = flood(address_, "flood on B's replica");
      other = flood(control_address, "flood on another replica");
    } else {
      other = flood(control_address, "flood on another replica");
      own = flood(address_, "flood on B's replica");
    }
    own_ratios.push_back(own / p99_alone);
    control_ratios.push_back(other / p99_alone);
    std::printf("round %d: B's handoff p99 alone %.0f us; flood on B's replica %.2fx, on "
                "another replica %.2fx; own/control %.2f\n",
                round + 1, p99_alone, own_ratios.back(), control_ratios.back(),
                own_ratios.back() / std::max(control_ratios.back(), 1e-9));
    if (HasFatalFailure() || HasFailure()) break;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  std::printf("B's handoff p99 during the flood over alone, medians of %zu rounds "
              "(per-connection cap %lld, refusal delay %lld ms): flood on B's replica %.2fx, "
              "on another replica (control) %.2fx; own/control %.2f\n",
              own_ratios.size(), static_cast<long long>(cap),
              static_cast<long long>(refusal_delay_->count()), median(own_ratios),
              median(control_ratios), median(own_ratios) / std::max(median(control_ratios), 1e-9));
  ::testing::Test::RecordProperty("b_p99_ratio_own_x100", static_cast<int>(100 * median(own_ratios)));
  ::testing::Test::RecordProperty("b_p99_ratio_control_x100",
                                  static_cast<int>(100 * median(control_ratios)));
  std::move(stop_watcher).Invoke();
  std::printf("most of one flood's locks in ZooKeeper %zu, of its nodes %zu\n", most_locks.load(),
              most_nodes.load());
  EXPECT_LE(most_nodes.load(), 100u);
  EXPECT_LE(most_locks.load(), 100u);

  // Both limits refused some of A's opens, and the metric counts them by
  // quota name (never by identity).
  auto metrics = HttpGet(replica_->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_TRUE(absl::StrContains(metrics->body,
                                "turnstile_quota_refusals_total{limit=\"streams\",quota=\"runaway-batch\"}"))
      << metrics->body.substr(0, 2000);
  EXPECT_FALSE(absl::StrContains(metrics->body, kFlooder));
}

// Without a policy every identity is unbounded: the automatic
// per-connection cap is --max-streams plus the headroom (a connection is
// never capped below what the replica admits), and an explicit flag wins.
TEST(PerConnectionStreamCapTest, DerivedFromTheQuotasUnlessSet) {
  ReplicaConfig c;
  c.max_streams = 10000;
  EXPECT_EQ(PerConnectionStreamCap(c, nullptr), 10000 + kConnectionStreamHeadroom);
  // A copy of a parsed policy's quotas.
  auto quotas = [](const std::string& json) {
    auto p = MustParse(json);
    return p ? p->quotas() : QuotaSet();
  };
  const QuotaSet bounded = quotas(
      R"({"quotas": [{"name": "a", "identities": ["x"], "max_streams": 300}],
          "default_quota": {"max_streams": 50}})");
  EXPECT_EQ(bounded.StreamBound(), 300u);
  EXPECT_EQ(PerConnectionStreamCap(c, &bounded), 300 + kConnectionStreamHeadroom);
  // An identity without a bound: no default quota, or a quota without
  // max_streams.
  const QuotaSet no_default =
      quotas(R"({"quotas": [{"name": "a", "identities": ["x"], "max_streams": 300}]})");
  EXPECT_EQ(no_default.StreamBound(), 0u);
  EXPECT_EQ(PerConnectionStreamCap(c, &no_default), 10000 + kConnectionStreamHeadroom);
  const QuotaSet unbounded_quota = quotas(
      R"({"quotas": [{"name": "a", "identities": ["x"], "opens_per_second": 5}],
          "default_quota": {"max_streams": 50}})");
  EXPECT_EQ(unbounded_quota.StreamBound(), 0u);
  // Never above what the replica admits.
  c.max_streams = 200;
  EXPECT_EQ(PerConnectionStreamCap(c, &bounded), 200 + kConnectionStreamHeadroom);
  c.max_streams_per_connection = 0;
  EXPECT_EQ(PerConnectionStreamCap(c, &bounded), 0);
  c.max_streams_per_connection = 77;
  EXPECT_EQ(PerConnectionStreamCap(c, &bounded), 77);
}

// A refusal waits the replica's delay, at most kMaxPausedRefusals wait at
// once (the next are answered at once), and a client that goes away, or a
// replica that stops, ends a waiting refusal at once: Acquire, KeepAlive
// and Observe streams.
TEST_F(QuotaReplicaTest, ARefusalWaitsTheDelayBoundedAndEndsWhenItsClientGoes) {
  WritePolicy(absl::StrCat(R"({"rules": [)", kAllowAll, R"(], "quotas": [{"name": "one", )",
                           R"("identities": [")", kSteady, R"("], "max_streams": 1}]})"));
  const milliseconds delay(6000);
  refusal_delay_ = delay;
  StartMtlsReplica();
  LockServiceImpl& svc = replica_->service();
  auto stub = StubAs(kSteady);
  AcquireStream held(stub.get(), OpenMsg("quota-pause/held", milliseconds(5000)));
  ASSERT_TRUE(held.Await(AcquireEvent::ACQUIRED));

  // 1,100 refused streams on one connection (no per-connection cap here),
  // a third of each kind; each reports its end on `cq`.
  constexpr int kStreams = 1100;
  const int kPausable = LockServiceImpl::kMaxPausedRefusals;
  struct Refused {
    grpc::ClientContext ctx;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::AcquireRequest, v1::AcquireEvent>> acquire;
    std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::KeepAliveRequest, v1::KeepAliveResponse>> ka;
    std::unique_ptr<grpc::ClientAsyncReader<v1::ObserveEvent>> observe;
    steady_clock::time_point opened;
  };
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Refused>> streams;
  v1::ObserveRequest observe_req;
  observe_req.set_name("quota-pause/held");
  const long rss_before_kb = ResidentKb();
  const auto start = steady_clock::now();
  for (int i = 0; i < kStreams; ++i) {
    auto r = std::make_unique<Refused>();
    r->opened = steady_clock::now();
    void* started = reinterpret_cast<void*>(static_cast<intptr_t>(2 * i + 1));  // odd: started
    void* ended = reinterpret_cast<void*>(static_cast<intptr_t>(2 * i + 2));    // even: ended
    if (i % 3 == 0) {
      r->acquire = stub->AsyncAcquire(&r->ctx, &cq, started);
      r->acquire->Finish(&r->status, ended);
    } else if (i % 3 == 1) {
      r->ka = stub->AsyncKeepAlive(&r->ctx, &cq, started);
      r->ka->Finish(&r->status, ended);
    } else {
      r->observe = stub->AsyncObserve(&r->ctx, observe_req, &cq, started);
      r->observe->Finish(&r->status, ended);
    }
    streams.push_back(std::move(r));
  }
  // Takes completions until `want` streams ended or `until`; returns the
  // ended ones' indexes.
  std::vector<bool> ended(kStreams, false);
  auto take_ends = [&](int want, steady_clock::time_point until) {
    int n = 0;
    for (bool e : ended) n += e ? 1 : 0;
    while (n < want) {
      void* tag = nullptr;
      bool ok = false;
      const auto left = std::max(until - steady_clock::now(), steady_clock::duration::zero());
      if (cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + left) !=
          grpc::CompletionQueue::GOT_EVENT) {
        break;
      }
      const intptr_t t = reinterpret_cast<intptr_t>(tag);
      if (t % 2 == 0) {
        ended[static_cast<size_t>(t / 2 - 1)] = true;
        ++n;
      }
    }
    return n;
  };
  // The replica holds 1,024 refusals back and answers the other 76 now.
  ASSERT_TRUE(WaitFor([&] { return svc.paused_refusals() == kPausable; }, milliseconds(5000)))
      << svc.paused_refusals() << " refusals wait";
  const int answered = take_ends(kStreams - kPausable, start + delay - milliseconds(500));
  ASSERT_LT(steady_clock::now(), start + delay) << "too slow to tell waiting refusals apart";
  EXPECT_EQ(answered, kStreams - kPausable);
  for (int i = 0; i < kStreams; ++i) {
    if (!ended[static_cast<size_t>(i)]) continue;
    EXPECT_EQ(streams[static_cast<size_t>(i)]->status.error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED)
        << streams[static_cast<size_t>(i)]->status.error_message();
  }
  EXPECT_EQ(svc.paused_refusals(), kPausable);
  // The gauge says so too.
  auto waiting = HttpGet(replica_->metrics_port(), "/metrics");
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_TRUE(absl::StrContains(waiting->body, absl::StrCat("\nturnstile_quota_refusals_waiting ",
                                                            kPausable, "\n")))
      << waiting->body.substr(0, 2000);
  // What 1,024 waiting refusals cost (the clients' side of the calls is in
  // this process too: an upper bound for the replica's).
  std::printf("resident memory with %d refusals waiting: +%ld kB (%.1f kB each, both sides)\n",
              kPausable, ResidentKb() - rss_before_kb,
              static_cast<double>(ResidentKb() - rss_before_kb) / kPausable);

  // Every waiting stream but one goes away: the replica ends their
  // refusals at once, long before the delay.
  int kept = -1;
  for (int i = 0; i < kStreams; ++i) {
    if (ended[static_cast<size_t>(i)]) continue;
    if (kept < 0) {
      kept = i;
      continue;
    }
    streams[static_cast<size_t>(i)]->ctx.TryCancel();
  }
  ASSERT_GE(kept, 0);
  ASSERT_TRUE(WaitFor([&] { return svc.paused_refusals() == 1; }, milliseconds(4000)))
      << svc.paused_refusals() << " refusals still wait";
  EXPECT_LT(steady_clock::now(), start + delay) << "cancelled refusals waited out the delay";

  // The one kept is answered RESOURCE_EXHAUSTED, not before the delay.
  Refused& last = *streams[static_cast<size_t>(kept)];
  ASSERT_EQ(take_ends(kStreams, steady_clock::now() + delay + milliseconds(20000)), kStreams);
  const auto waited = steady_clock::now() - last.opened;
  EXPECT_EQ(last.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << last.status.error_message();
  EXPECT_TRUE(absl::StrContains(last.status.error_message(), "quota \"one\""))
      << last.status.error_message();
  EXPECT_GE(waited, delay);
  EXPECT_EQ(svc.paused_refusals(), 0);
  // The hold was never disturbed.
  EXPECT_FALSE(held.ended());
  // A replica that stops with a refusal waiting ends it (Stop gives calls
  // 2 s, then cancels them) instead of waiting out the delay.
  AcquireStream late(stub.get(), OpenMsg("quota-pause/late", milliseconds(5000)));
  ASSERT_TRUE(WaitFor([&] { return svc.paused_refusals() == 1; }, milliseconds(4000)));
  const auto stop_at = steady_clock::now();
  replica_.reset();
  EXPECT_LT(steady_clock::now() - stop_at, delay) << "the stop waited out a refusal's delay";
  EXPECT_TRUE(late.AwaitEnd(milliseconds(10000)));
  EXPECT_TRUE(held.AwaitEnd(milliseconds(10000)));
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

// Must show 2: a reload below an identity's use refuses new opens and
// disturbs no hold; a bad quota keeps the old policy.
TEST_F(QuotaReplicaTest, AReloadBelowCurrentUseRefusesNewOpensAndKeepsEveryHold) {
  const std::string five = absl::StrCat(R"({"rules": [)", kAllowAll, R"(], "quotas": [{"name": "web", "identities": [")",
                                        kSteady, R"("], "max_contenders": 5}]})");
  WritePolicy(five);
  StartMtlsReplica();
  auto web = StubAs(kSteady);
  std::vector<std::unique_ptr<AcquireStream>> holds;
  std::vector<uint64_t> tokens;
  for (int i = 0; i < 3; ++i) {
    holds.push_back(std::make_unique<AcquireStream>(
        web.get(), OpenMsg(absl::StrCat("quota-reload/", i), milliseconds(5000))));
    auto got = holds.back()->Await(AcquireEvent::ACQUIRED);
    ASSERT_TRUE(got);
    tokens.push_back(got->acquired().fencing_token());
  }
  WritePolicy(absl::StrCat(R"({"rules": [)", kAllowAll, R"(], "quotas": [{"name": "web-narrow", "identities": [")", kSteady,
                           R"("], "max_contenders": 1}]})"));
  ASSERT_TRUE(replica_->ReloadPolicy());
  AcquireStream refused(web.get(), OpenMsg("quota-reload/new", milliseconds(5000)));
  auto end = refused.AwaitEnd();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(end->error_message(), "quota \"web-narrow\"")) << end->error_message();
  EXPECT_TRUE(absl::StrContains(end->error_message(), "at most 1 contender")) << end->error_message();
  // The three holds: no event, still held (Describe shows each token).
  for (size_t i = 0; i < holds.size(); ++i) {
    EXPECT_FALSE(holds[i]->Next(milliseconds(100))) << "hold " << i << " was disturbed";
    EXPECT_FALSE(holds[i]->ended());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::DescribeRequest req;
    req.set_name(absl::StrCat("quota-reload/", i));
    v1::DescribeResponse resp;
    ASSERT_TRUE(web->Describe(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.holders_size(), 1);
    EXPECT_EQ(resp.holders(0).fencing_token(), tokens[i]);
  }
  // A bad quota: rejected, the narrow quota stays in force.
  WritePolicy(absl::StrCat(R"({"rules": [)", kAllowAll, R"(], "quotas": [{"name": "web", "identities": [")", kSteady,
                           R"("], "max_streams": 2, "max_contenders": 9}]})"));
  EXPECT_FALSE(replica_->ReloadPolicy());
  AcquireStream still_refused(web.get(), OpenMsg("quota-reload/new", milliseconds(5000)));
  auto end2 = still_refused.AwaitEnd();
  ASSERT_TRUE(end2);
  EXPECT_EQ(end2->error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(end2->error_message(), "web-narrow")) << end2->error_message();
  // Released down to the quota, a new open is allowed again.
  for (auto& h : holds) {
    h->SendRelease();
    ASSERT_TRUE(h->AwaitEnd());
  }
  holds.clear();
  ASSERT_TRUE(WaitFor([&] {
    AcquireStream again(web.get(), OpenMsg("quota-reload/new", milliseconds(5000)));
    auto got = again.Await(AcquireEvent::ACQUIRED, milliseconds(5000));
    if (got) again.SendRelease();
    return got.has_value();
  }, milliseconds(10000)));
}

// Without mutual TLS a file of quotas alone is allowed, the caller's
// address is its identity, and a refusal is audited; a file with rules is
// refused at start.
TEST_F(QuotaReplicaTest, WithoutMutualTlsTheCallersAddressIsItsIdentity) {
  if (MtlsMode()) GTEST_SKIP() << "plaintext replicas only";
  WritePolicy(R"({"default_quota": {"name": "per-address", "max_streams": 2}})");
  // A plaintext turnstiled with the policy file (its audit log read with
  // its stdout).
  auto spawn_plain = [&] {
    return ChildProcess::Spawn(
        {"/bin/sh", "-c",
         absl::StrCat("exec '", TestBinary("turnstiled"),
                      "' --listen 127.0.0.1:0 --log-level error --metrics-listen '' --zk '",
                      connect_, "' --zk-root '", root_, "' --authz-file '", policy_file_,
                      "' 2>&1")});
  };
  auto p = spawn_plain();
  ASSERT_TRUE(p);
  auto address = AwaitReplicaServing(*p, grpc::InsecureChannelCredentials());
  ASSERT_TRUE(address.ok()) << address.status();
  auto stub = NewStub(*address);
  // One Acquire and one Observe: the quota's two streams.
  AcquireStream one(stub.get(), OpenMsg("quota-addr/1", milliseconds(5000)));
  ASSERT_TRUE(one.Await(AcquireEvent::ACQUIRED));
  grpc::ClientContext observe_ctx;
  v1::ObserveRequest observe_req;
  observe_req.set_name("quota-addr/1");
  auto observe = stub->Observe(&observe_ctx, observe_req);
  v1::ObserveEvent state;
  ASSERT_TRUE(observe->Read(&state)) << "the Observe stream was refused";
  // A KeepAlive stream is the third: refused.
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto ka = stub->KeepAlive(&ctx);
    v1::KeepAliveResponse resp;
    EXPECT_FALSE(ka->Read(&resp));
    grpc::Status s = ka->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  }
  AcquireStream three(stub.get(), OpenMsg("quota-addr/3", milliseconds(5000)));
  auto end = three.AwaitEnd();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(end->error_message(),
                                "quota \"per-address\" allows identity \"127.0.0.1\" at most 2"))
      << end->error_message();
  auto audit = p->AwaitLine("{\"audit\"", milliseconds(10000));
  ASSERT_TRUE(audit);
  EXPECT_TRUE(absl::StrContains(*audit, "\"audit\":\"quota_exceeded\"")) << *audit;
  EXPECT_TRUE(absl::StrContains(*audit, "\"identity\":\"127.0.0.1\"")) << *audit;
  EXPECT_TRUE(absl::StrContains(*audit, "quota \\\"per-address\\\" (streams)")) << *audit;
  one.SendRelease();
  ASSERT_TRUE(one.AwaitEnd());
  observe_ctx.TryCancel();
  (void)observe->Finish();
  p->Signal(SIGTERM);
  EXPECT_EQ(p->Wait(milliseconds(20000)), 0);

  // Rules without mutual TLS: the replica does not start, and says why.
  WritePolicy(R"({"rules": [{"identities": ["*"], "locks": [""], "admin": true}]})");
  auto bad = spawn_plain();
  ASSERT_TRUE(bad);
  auto said = bad->AwaitLine("turnstiled: --authz-file", milliseconds(20000));
  ASSERT_TRUE(said);
  EXPECT_TRUE(absl::StrContains(*said, "rules, which need --tls-client-ca-file")) << *said;
  EXPECT_TRUE(absl::StrContains(*said, "may hold only quotas")) << *said;
  auto code = bad->Wait(milliseconds(20000));
  ASSERT_TRUE(code);
  EXPECT_NE(*code, 0);
}

}  // namespace
}  // namespace turnstile::testing
