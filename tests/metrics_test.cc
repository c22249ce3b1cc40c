// Prometheus metrics of an in-process replica, scraped over HTTP from its
// exposer: the per-lock series cap and exact gauges however streams end.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

using v1::AcquireEvent;

// GET /metrics; the body, or "" on any failure.
std::string Scrape(int port) {
  absl::StatusOr<HttpResponse> r = HttpGet(port, "/metrics");
  return r.ok() && r->status == 200 ? r->body : "";
}

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The text format, simply: `name{k="v",...} value` lines; no escapes in the
// label values these tests use.
std::vector<Sample> Parse(const std::string& text) {
  std::vector<Sample> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t brace = line.find('{');
    size_t space;
    if (brace != absl::string_view::npos) {
      s.name = std::string(line.substr(0, brace));
      size_t end = line.find('}', brace);
      if (end == absl::string_view::npos) continue;
      for (absl::string_view kv :
           absl::StrSplit(line.substr(brace + 1, end - brace - 1), ',', absl::SkipEmpty())) {
        size_t eq = kv.find('=');
        if (eq == absl::string_view::npos) continue;
        absl::string_view v = kv.substr(eq + 1);
        if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
        s.labels[std::string(kv.substr(0, eq))] = std::string(v);
      }
      space = line.find(' ', end);
    } else {
      space = line.find(' ');
      s.name = std::string(line.substr(0, space));
    }
    if (space == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(space + 1);
    rest = rest.substr(0, rest.find(' '));  // drop a timestamp
    if (!absl::SimpleAtod(rest, &s.value)) continue;
    out.push_back(std::move(s));
  }
  return out;
}

class MetricsTest : public ::testing::Test {
 protected:
  void StartWithCap(int64_t max_locks) {
    zk_connect_ = SharedZkServer().ConnectString();
    ReplicaConfig cfg = TestConfig(zk_connect_, UniqueRoot("metrics"));
    cfg.metrics_listen = "127.0.0.1:0";
    cfg.metrics_max_locks = max_locks;
    // Every name, also under the mTLS suite's policy (whose default hides
    // them: authz_test's MetricsShowNoLockNamesUnderAPolicyByDefault).
    cfg.metrics_lock_prefixes = "*";
    r_ = StartReplica(cfg);
    ASSERT_TRUE(r_);
    ASSERT_GT(r_->metrics_port(), 0);
    stub_ = NewStub(r_->address());
  }

  std::vector<Sample> Samples() { return Parse(Scrape(r_->metrics_port())); }

  // The value of the one series `name` with exactly `labels`; -1 if absent.
  double Value(const std::vector<Sample>& all, const std::string& name,
               const std::map<std::string, std::string>& labels = {}) {
    for (const Sample& s : all) {
      if (s.name == name && s.labels == labels) return s.value;
    }
    return -1;
  }
  double Lock(const std::vector<Sample>& all, const std::string& name, const std::string& lock) {
    return Value(all, name, {{"lock", lock}});
  }
  // Waits until the per-lock gauges of `lock` read `waiters` and `holders`.
  bool GaugesBecome(const std::string& lock, double waiters, double holders) {
    return WaitFor([&] {
      auto all = Samples();
      if (all.empty()) return false;
      auto v = [](double x) { return x < 0 ? 0 : x; };  // absent = no contenders
      return v(Lock(all, "turnstile_lock_waiters", lock)) == waiters &&
             v(Lock(all, "turnstile_lock_holders", lock)) == holders;
    }, milliseconds(15000));
  }

  std::string zk_connect_;
  std::unique_ptr<Replica> r_;
  std::unique_ptr<v1::LockService::Stub> stub_;
};

TEST_F(MetricsTest, PerLockSeriesAreCappedWithOverflow) {
  StartWithCap(5);
  std::vector<std::unique_ptr<AcquireStream>> holders;
  for (int i = 0; i < 8; ++i) {
    holders.push_back(std::make_unique<AcquireStream>(
        stub_.get(), OpenMsg(absl::StrCat("cap-", i), milliseconds(30000))));
    ASSERT_TRUE(holders.back()->Await(AcquireEvent::ACQUIRED)) << i;
  }
  std::set<std::string> labels;
  double sum = 0;
  bool ok = WaitFor([&] {
    labels.clear();
    sum = 0;
    for (const Sample& s : Samples()) {
      if (s.name != "turnstile_lock_holders") continue;
      labels.insert(s.labels.at("lock"));
      sum += s.value;
    }
    return labels.size() == 6 && sum == 8;
  }, milliseconds(15000));
  EXPECT_TRUE(ok) << "labels " << labels.size() << " sum " << sum;
  EXPECT_EQ(labels.count("_overflow"), 1u);
  auto all = Samples();
  EXPECT_EQ(Lock(all, "turnstile_lock_holders", "_overflow"), 3);
  EXPECT_EQ(Lock(all, "turnstile_lock_waiters", "_overflow"), 0);
  EXPECT_EQ(Value(all, "turnstile_acquires_total", {{"result", "acquired"}}), 8);
  EXPECT_EQ(Value(all, "turnstile_open_streams", {{"kind", "acquire"}}), 8);
}

TEST_F(MetricsTest, GaugesStayExactHoweverStreamsEnd) {
  StartWithCap(100);
  const std::string name = "gauges";
  // A holder that releases, with a waiter that cancels and one that times out.
  auto h1 = std::make_unique<AcquireStream>(stub_.get(), OpenMsg(name, milliseconds(30000)));
  ASSERT_TRUE(h1->Await(AcquireEvent::ACQUIRED));
  auto cancel = std::make_unique<AcquireStream>(stub_.get(), OpenMsg(name, milliseconds(30000)));
  ASSERT_TRUE(cancel->Await(AcquireEvent::QUEUED));
  auto timeout = std::make_unique<AcquireStream>(stub_.get(), OpenMsg(name, milliseconds(2000)));
  ASSERT_TRUE(timeout->Await(AcquireEvent::QUEUED));
  EXPECT_TRUE(GaugesBecome(name, 2, 1));
  {
    auto all = Samples();
    EXPECT_EQ(Value(all, "turnstile_open_streams", {{"kind", "acquire"}}), 3);
  }

  cancel->SendRelease();
  auto st = cancel->AwaitEnd();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->error_code(), grpc::StatusCode::OK);  // release while waiting: OK
  EXPECT_TRUE(GaugesBecome(name, 1, 1));
  st = timeout->AwaitEnd();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(GaugesBecome(name, 0, 1));

  // A try-once that fails while the lock is held.
  {
    AcquireStream once(stub_.get(), OpenMsg(name, milliseconds(0)));
    auto s = once.AwaitEnd();
    ASSERT_TRUE(s);
    EXPECT_EQ(s->error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }

  h1->SendRelease();
  ASSERT_TRUE(h1->Await(AcquireEvent::RELEASED));
  EXPECT_TRUE(GaugesBecome(name, 0, 0));

  // A holder revoked by Release-by-lease-id, with a waiter that then gets it.
  auto h2 = std::make_unique<AcquireStream>(stub_.get(), OpenMsg(name, milliseconds(30000)));
  auto granted = h2->Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(granted);
  auto next = std::make_unique<AcquireStream>(stub_.get(), OpenMsg(name, milliseconds(30000)));
  ASSERT_TRUE(next->Await(AcquireEvent::QUEUED));
  EXPECT_TRUE(GaugesBecome(name, 1, 1));
  {
    v1::ReleaseRequest req;
    req.set_lease_id(granted->acquired().lease_id());
    v1::ReleaseResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Release(&ctx, req, &resp).ok());
  }
  auto lost = h2->Await(AcquireEvent::LOST);
  ASSERT_TRUE(lost);
  ASSERT_TRUE(next->Await(AcquireEvent::ACQUIRED));
  EXPECT_TRUE(GaugesBecome(name, 0, 1));
  next->SendRelease();
  ASSERT_TRUE(next->Await(AcquireEvent::RELEASED));

  // A TTL lease that expires without KeepAlive.
  auto h3 = std::make_unique<AcquireStream>(
      stub_.get(), OpenMsg(name, milliseconds(30000), "ttl", milliseconds(600)));
  ASSERT_TRUE(h3->Await(AcquireEvent::ACQUIRED));
  ASSERT_TRUE(h3->Await(AcquireEvent::LOST));

  h1.reset();
  cancel.reset();
  timeout.reset();
  h2.reset();
  next.reset();
  h3.reset();

  std::string why;
  bool zero = WaitFor([&] {
    auto all = Samples();
    if (all.empty()) {
      why = "no scrape";
      return false;
    }
    for (const Sample& s : all) {
      if ((s.name == "turnstile_lock_waiters" || s.name == "turnstile_lock_holders") &&
          s.value != 0) {
        why = absl::StrCat(s.name, "{lock=", s.labels.at("lock"), "} = ", s.value);
        return false;
      }
    }
    if (Value(all, "turnstile_open_streams", {{"kind", "acquire"}}) != 0) {
      why = "open_streams";
      return false;
    }
    return true;
  }, milliseconds(15000));
  EXPECT_TRUE(zero) << why;

  if (getenv("TURNSTILE_METRICS_TEST_DUMP") != nullptr) {
    fprintf(stderr, "%s", Scrape(r_->metrics_port()).c_str());  // for debugging
  }
  auto all = Samples();
  EXPECT_EQ(Value(all, "turnstile_acquires_total", {{"result", "acquired"}}), 4);
  EXPECT_EQ(Value(all, "turnstile_acquires_total", {{"result", "cancelled"}}), 1);
  EXPECT_EQ(Value(all, "turnstile_acquires_total", {{"result", "timeout"}}), 1);
  EXPECT_EQ(Value(all, "turnstile_acquires_total", {{"result", "busy"}}), 1);
  EXPECT_EQ(Value(all, "turnstile_acquires_total", {{"result", "failed"}}), 0);
  EXPECT_EQ(Value(all, "turnstile_locks_lost_total", {{"reason", "deleted"}}), 1);
  EXPECT_EQ(Value(all, "turnstile_locks_lost_total", {{"reason", "lease_expired"}}), 1);
  EXPECT_EQ(Value(all, "turnstile_locks_lost_total", {{"reason", "session_expired"}}), 0);
  EXPECT_EQ(Value(all, "turnstile_acquire_wait_seconds_count", {{"result", "acquired"}}), 4);
  EXPECT_EQ(Value(all, "turnstile_hold_seconds_count"), 4);
  EXPECT_GE(Value(all, "turnstile_handoff_seconds_count"), 1);
  EXPECT_EQ(Value(all, "turnstile_build_info", {{"version", "0.1.0"}}), 1);
  EXPECT_EQ(Value(all, "turnstile_zk_session_up"), 1);
  EXPECT_EQ(Value(all, "turnstile_serving"), 1);
  EXPECT_GE(Value(all, "turnstile_zk_request_duration_seconds_count", {{"op", "create"}}), 7);
  EXPECT_GE(Value(all, "turnstile_zk_watch_events_total"), 1);
  EXPECT_EQ(Value(all, "turnstile_grpc_requests_total", {{"method", "Release"}, {"code", "OK"}}),
            1);
  EXPECT_GE(Value(all, "turnstile_grpc_requests_total",
                  {{"method", "Acquire"}, {"code", "DEADLINE_EXCEEDED"}}),
            1);
}

// Issue 12: shared holders make a lock's holder gauge exceed 1; revocation
// requests are counted where written and where told.
TEST_F(MetricsTest, SharedHoldersAndRevocations) {
  StartWithCap(100);
  const std::string name = "m-shared";
  std::vector<std::unique_ptr<AcquireStream>> readers;
  std::string lease;
  for (int i = 0; i < 2; ++i) {
    v1::AcquireOpen open = OpenMsg(name, milliseconds(30000), "reader");
    open.set_kind(v1::LOCK_KIND_SHARED);
    readers.push_back(std::make_unique<AcquireStream>(stub_.get(), open));
    auto acquired = readers.back()->Await(AcquireEvent::ACQUIRED);
    ASSERT_TRUE(acquired);
    lease = acquired->acquired().lease_id();
  }
  EXPECT_TRUE(GaugesBecome(name, 0, 2));
  {
    grpc::ClientContext ctx;
    v1::RevokeRequest req;
    req.set_lease_id(lease);
    req.set_requester("metrics");
    v1::RevokeResponse resp;
    ASSERT_TRUE(stub_->Revoke(&ctx, req, &resp).ok());
  }
  ASSERT_TRUE(readers.back()->Await(AcquireEvent::REVOKE_REQUESTED));
  double requested = 0, delivered = 0, rpcs = 0;
  EXPECT_TRUE(WaitFor([&] {
    auto all = Samples();
    requested = Value(all, "turnstile_revocations_total", {{"step", "requested"}});
    delivered = Value(all, "turnstile_revocations_total", {{"step", "delivered"}});
    rpcs = Value(all, "turnstile_grpc_requests_total", {{"method", "Revoke"}, {"code", "OK"}});
    return requested == 1 && delivered == 1 && rpcs == 1;
  }, milliseconds(15000))) << requested << " " << delivered << " " << rpcs;
  readers.clear();
  EXPECT_TRUE(GaugesBecome(name, 0, 0));
}

// A semaphore (issue 21): holders per lock up to N, and N itself as
// turnstile_lock_max_holders; no such series for a mutex.
TEST_F(MetricsTest, SemaphoreHoldersAndTheirN) {
  StartWithCap(100);
  const std::string name = "m-sem";
  std::vector<std::unique_ptr<AcquireStream>> streams;
  for (int i = 0; i < 4; ++i) {
    v1::AcquireOpen open = OpenMsg(name, milliseconds(30000), "permit");
    open.set_kind(v1::LOCK_KIND_SEMAPHORE);
    open.set_max_holders(3);
    streams.push_back(std::make_unique<AcquireStream>(stub_.get(), open));
    ASSERT_TRUE(streams.back()->Next()) << i;
  }
  AcquireStream mutex(stub_.get(), OpenMsg("m-mutex", milliseconds(30000)));
  ASSERT_TRUE(mutex.Await(AcquireEvent::ACQUIRED));
  EXPECT_TRUE(GaugesBecome(name, 1, 3));
  auto all = Samples();
  EXPECT_EQ(Lock(all, "turnstile_lock_max_holders", name), 3);
  EXPECT_EQ(Lock(all, "turnstile_lock_max_holders", "m-mutex"), -1);  // absent
  streams.clear();
  EXPECT_TRUE(GaugesBecome(name, 0, 0));
  EXPECT_TRUE(WaitFor([&] { return Lock(Samples(), "turnstile_lock_max_holders", name) == -1; },
                      milliseconds(15000)));
}

TEST_F(MetricsTest, EmptyListenDisablesMetrics) {
  ReplicaConfig cfg = TestConfig(SharedZkServer().ConnectString(), UniqueRoot("nometrics"));
  cfg.metrics_listen = "";
  auto r = StartReplica(cfg);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->metrics_port(), 0);
}

}  // namespace
}  // namespace turnstile::testing
