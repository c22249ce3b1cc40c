// Observe and Proclaim (issue 23) through gRPC against a real ZooKeeper, on
// two replicas: observers see every leader in order, herd-free (ZooKeeper's
// watch count and the replicas' reads do not grow with the number of
// observers); Proclaim changes the value observers see and refuses a stale
// token or a released lease; a lost session is told as UNKNOWN and the
// fresh state follows; a lock node created later is seen; a drain ends the
// streams with UNAVAILABLE.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "tests/two_replicas.h"

namespace turnstile::testing {
namespace {

using v1::AcquireEvent;
using v1::ObserveEvent;
using Clock = std::chrono::steady_clock;

// One Observe stream, read by a thread of its own.
class ObserveStream {
 public:
  struct Seen {
    Clock::time_point at;
    ObserveEvent event;
  };
  ObserveStream(v1::LockService::Stub* stub, const std::string& name) {
    v1::ObserveRequest req;
    req.set_name(name);
    reader_ = stub->Observe(&ctx_, req);
    thread_ = std::thread([this] {
      ObserveEvent ev;
      while (reader_->Read(&ev)) {
        std::lock_guard<std::mutex> l(mu_);
        events_.push_back(Seen{Clock::now(), ev});
        cv_.notify_all();
      }
      grpc::Status s = reader_->Finish();
      std::lock_guard<std::mutex> l(mu_);
      status_ = s;
      cv_.notify_all();
    });
  }
  ~ObserveStream() {
    ctx_.TryCancel();
    thread_.join();
  }
  // Waits until some event (from `from` on) satisfies `pred`; its index.
  std::optional<size_t> AwaitEvent(const std::function<bool(const ObserveEvent&)>& pred,
                                   size_t from = 0, milliseconds timeout = milliseconds(20000)) {
    std::unique_lock<std::mutex> l(mu_);
    std::optional<size_t> found;
    cv_.wait_for(l, timeout, [&] {
      for (size_t i = from; i < events_.size(); ++i) {
        if (pred(events_[i].event)) {
          found = i;
          return true;
        }
      }
      return status_.has_value();
    });
    return found;
  }
  std::optional<grpc::Status> AwaitEnd(milliseconds timeout = milliseconds(20000)) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, timeout, [&] { return status_.has_value(); });
    return status_;
  }
  std::vector<Seen> events() const {
    std::lock_guard<std::mutex> l(mu_);
    return std::vector<Seen>(events_.begin(), events_.end());
  }
  size_t size() const {
    std::lock_guard<std::mutex> l(mu_);
    return events_.size();
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<ObserveEvent>> reader_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Seen> events_;
  std::optional<grpc::Status> status_;
  std::thread thread_;
};

bool LeaderIs(const ObserveEvent& e, uint64_t token) {
  return e.state() == ObserveEvent::CURRENT && e.holders_size() == 1 &&
         e.holders(0).fencing_token() == token;
}
bool NoLeader(const ObserveEvent& e) {
  return e.state() == ObserveEvent::CURRENT && e.holders_size() == 0;
}

v1::AcquireOpen Candidate(const std::string& name, const std::string& owner,
                          const std::string& value) {
  v1::AcquireOpen o = OpenMsg(name, milliseconds(60000), owner);
  (*o.mutable_metadata())["value"] = value;
  return o;
}

grpc::Status Proclaim(v1::LockService::Stub* stub, const std::string& lease, uint64_t token,
                      const std::map<std::string, std::string>& metadata) {
  grpc::ClientContext ctx;
  v1::ProclaimRequest req;
  req.set_lease_id(lease);
  req.set_fencing_token(token);
  req.mutable_metadata()->insert(metadata.begin(), metadata.end());
  v1::ProclaimResponse resp;
  return stub->Proclaim(&ctx, req, &resp);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

class ObserveTest : public TwoReplicaTest {
 protected:
  ObserveTest() : TwoReplicaTest("observe") {}
  uint64_t Reads() { return r1_->observers().stats().reads + r2_->observers().stats().reads; }
};

// Must-show 1: 200 observers over 2 replicas, the leader changing 50 times.
// Every observer sees every leader in order; ZooKeeper's watch count with
// 200 observers equals that with 2 (a small constant per replica); the
// replicas' reads per change do not depend on the number of observers.
TEST_F(ObserveTest, TwoHundredObserversSeeEveryLeaderInOrderHerdFree) {
  const std::string name = "election";
  // A leader and a waiting candidate, before anyone observes.
  std::deque<std::unique_ptr<AcquireStream>> candidates;
  std::vector<uint64_t> leaders;
  candidates.push_back(std::make_unique<AcquireStream>(s1_.get(), Candidate(name, "c0", "v0")));
  auto first = candidates.back()->Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(first);
  leaders.push_back(first->acquired().fencing_token());
  candidates.push_back(std::make_unique<AcquireStream>(s2_.get(), Candidate(name, "c1", "v1")));
  ASSERT_TRUE(ContendersBecome(name, 2));
  ASSERT_TRUE(candidates.back()->Await(AcquireEvent::QUEUED));
  const int64_t w0 = MntrValue("zk_watch_count");

  // 2 observers, one per replica.
  std::vector<std::unique_ptr<ObserveStream>> observers;
  auto add_observers = [&](size_t n) {
    for (size_t i = 0; i < n; ++i) {
      observers.push_back(std::make_unique<ObserveStream>(
          observers.size() % 2 == 0 ? s1_.get() : s2_.get(), name));
    }
    for (auto& o : observers) {
      ASSERT_TRUE(o->AwaitEvent([&](const ObserveEvent& e) { return LeaderIs(e, leaders[0]); }))
          << "an observer did not see the first leader";
    }
  };
  add_observers(2);
  const int64_t w2 = MntrValue("zk_watch_count");
  add_observers(198);
  const int64_t w200 = MntrValue("zk_watch_count");
  std::printf("zk_watch_count: %lld with no observer, %lld with 2, %lld with 200\n",
              static_cast<long long>(w0), static_cast<long long>(w2),
              static_cast<long long>(w200));
  // Per replica: one children watch on the lock node and one data watch
  // on the leader's node.
  EXPECT_LE(w2 - w0, 2 * 2);
  EXPECT_EQ(w200, w2) << "the watch count grew with the number of observers";
  auto wchp = SharedZkServer().WatchesByPath();
  ASSERT_TRUE(wchp.ok());
  for (const auto& [path, sessions] : *wchp) {
    if (path.rfind(LockPath(name), 0) != 0) continue;
    std::set<std::string> distinct(sessions.begin(), sessions.end());
    EXPECT_EQ(distinct.size(), sessions.size()) << path;
    std::printf("wchp %s: %zu sessions\n", path.c_str(), sessions.size());
  }

  // 50 changes: release the leader; the waiting candidate is granted; a new
  // candidate queues behind it (alternating replicas). Each change is
  // awaited by every observer before the next.
  std::vector<double> latency_ms;
  const uint64_t reads_before = Reads();
  for (int change = 1; change <= 50; ++change) {
    const std::string owner = "c" + std::to_string(change + 1);
    candidates.push_back(std::make_unique<AcquireStream>(
        change % 2 == 0 ? s1_.get() : s2_.get(), Candidate(name, owner, "v" + owner)));
    ASSERT_TRUE(candidates.back()->Await(AcquireEvent::QUEUED));
    candidates.front()->SendRelease();
    ASSERT_TRUE(candidates.front()->Await(AcquireEvent::RELEASED));
    candidates.pop_front();
    auto granted = candidates.front()->Await(AcquireEvent::ACQUIRED);
    ASSERT_TRUE(granted) << "change " << change;
    const Clock::time_point granted_at = Clock::now();
    const uint64_t token = granted->acquired().fencing_token();
    leaders.push_back(token);
    for (auto& o : observers) {
      auto at = o->AwaitEvent([&](const ObserveEvent& e) { return LeaderIs(e, token); });
      ASSERT_TRUE(at) << "an observer did not see leader " << change;
      const auto seen = o->events()[*at].at;
      latency_ms.push_back(
          std::chrono::duration<double, std::milli>(seen - granted_at).count());
    }
  }
  const uint64_t reads = Reads() - reads_before;
  // Every observer saw every leader, in order, and never two at once.
  for (auto& o : observers) {
    std::vector<uint64_t> seen;
    for (const auto& s : o->events()) {
      ASSERT_EQ(s.event.state(), ObserveEvent::CURRENT);
      ASSERT_LE(s.event.holders_size(), 1);
      if (s.event.holders_size() == 1 &&
          (seen.empty() || seen.back() != s.event.holders(0).fencing_token())) {
        seen.push_back(s.event.holders(0).fencing_token());
      }
    }
    EXPECT_EQ(seen, leaders);
  }
  const int64_t w_end = MntrValue("zk_watch_count");
  EXPECT_EQ(w_end, w200) << "watches accumulated over 50 changes";
  // Each change costs each replica a few reads (the release, the grant,
  // the newcomer), however many observe: 200 observers would be 200x.
  EXPECT_LE(reads, 50u * 2 * 4) << reads << " reads for 50 changes";
  std::printf("grant -> observer notified over %zu notifications: p50 %.2f ms, p99 %.2f ms; "
              "%llu reads for 50 changes on 2 replicas\n",
              latency_ms.size(), Percentile(latency_ms, 0.5), Percentile(latency_ms, 0.99),
              static_cast<unsigned long long>(reads));
  RecordProperty("p50_ms", std::to_string(Percentile(latency_ms, 0.5)));
  RecordProperty("p99_ms", std::to_string(Percentile(latency_ms, 0.99)));
}

// Must-show 3: Proclaim changes the value observers see; the holder keeps
// its hold and token; a stale token or a released lease is refused with the
// documented codes and changes nothing.
TEST_F(ObserveTest, ProclaimChangesTheValueAndRefusesStaleTokensAndGoneLeases) {
  const std::string name = "proclaimed";
  AcquireStream leader(s1_.get(), Candidate(name, "leader", "10.0.0.1:80"));
  auto acq = leader.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq);
  const std::string lease = acq->acquired().lease_id();
  const uint64_t token = acq->acquired().fencing_token();
  ObserveStream watcher(s2_.get(), name);
  ASSERT_TRUE(watcher.AwaitEvent([&](const ObserveEvent& e) {
    return LeaderIs(e, token) && e.holders(0).metadata().at("value") == "10.0.0.1:80";
  }));

  // Through the other replica.
  grpc::Status s = Proclaim(s2_.get(), lease, token, {{"value", "10.0.0.2:80"}, {"term", "7"}});
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(watcher.AwaitEvent([&](const ObserveEvent& e) {
    return LeaderIs(e, token) && e.holders(0).metadata().at("value") == "10.0.0.2:80" &&
           e.holders(0).metadata().at("term") == "7";
  }));
  v1::DescribeResponse d;
  ASSERT_TRUE(Describe(s1_.get(), name, &d).ok());
  ASSERT_EQ(d.holders_size(), 1);
  EXPECT_EQ(d.holders(0).metadata().at("value"), "10.0.0.2:80");
  EXPECT_EQ(d.holders(0).fencing_token(), token);

  // A stale token: FAILED_PRECONDITION, nothing changed.
  s = Proclaim(s1_.get(), lease, token - 1, {{"value", "stale"}});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  // Bad input: INVALID_ARGUMENT.
  EXPECT_EQ(Proclaim(s1_.get(), lease, 0, {{"value", "x"}}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Proclaim(s1_.get(), "not-a-lease", token, {{"value", "x"}}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  std::map<std::string, std::string> too_many;
  for (int i = 0; i < 17; ++i) too_many["k" + std::to_string(i)] = "v";
  EXPECT_EQ(Proclaim(s1_.get(), lease, token, too_many).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Proclaim(s1_.get(), lease, token, {{std::string(65, 'k'), "v"}}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Describe(s2_.get(), name, &d).ok());
  EXPECT_EQ(d.holders(0).metadata().at("value"), "10.0.0.2:80");

  // The hold is intact: no event on its stream, and it releases cleanly.
  EXPECT_FALSE(leader.Next(milliseconds(0)));
  EXPECT_FALSE(leader.ended());
  leader.SendRelease();
  ASSERT_TRUE(leader.Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(watcher.AwaitEvent(NoLeader));
  // A released lease: NOT_FOUND.
  s = Proclaim(s1_.get(), lease, token, {{"value", "late"}});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
}

// A waiter that gives up on the observer's replica drops its watch on the
// holder's node. The observer watches that node too, on the same ZooKeeper
// session: its watch must survive (the engine cannot see it, the session
// can), or a Proclaim made later is never seen there.
TEST_F(ObserveTest, AWaiterGivingUpKeepsTheObserversWatchOnTheHolder) {
  const std::string name = "shared-watch";
  AcquireStream leader(s2_.get(), Candidate(name, "leader", "one"));
  auto acq = leader.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq);
  const std::string lease = acq->acquired().lease_id();
  const uint64_t token = acq->acquired().fencing_token();
  ObserveStream watcher(s1_.get(), name);
  ASSERT_TRUE(watcher.AwaitEvent([&](const ObserveEvent& e) { return LeaderIs(e, token); }));
  for (int round = 0; round < 3; ++round) {
    AcquireStream waiter(s1_.get(), OpenMsg(name, milliseconds(200), "impatient"));
    auto queued = watcher.AwaitEvent([&](const ObserveEvent& e) {
      return LeaderIs(e, token) && e.waiters() == 1;
    }, watcher.size() - 1);
    ASSERT_TRUE(queued);
    auto end = waiter.AwaitEnd();
    ASSERT_TRUE(end);
    EXPECT_EQ(end->error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << end->error_message();
    ASSERT_TRUE(watcher.AwaitEvent([&](const ObserveEvent& e) {
      return LeaderIs(e, token) && e.waiters() == 0;
    }, *queued + 1));
  }
  // The observer saw the last waiter leave: its read, on the replica's
  // session, came after that waiter's watch removal (one session's requests
  // are served in order), so the removal is done before the Proclaim.
  const size_t from = watcher.size();
  grpc::Status s = Proclaim(s2_.get(), lease, token, {{"value", "two"}});
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(watcher.AwaitEvent([&](const ObserveEvent& e) {
    return LeaderIs(e, token) && e.holders(0).metadata().at("value") == "two";
  }, from, milliseconds(10000))) << "the observer's watch on the holder was removed with the waiter's";
  leader.SendRelease();
  ASSERT_TRUE(leader.Await(AcquireEvent::RELEASED));
}

// A new observer's first state comes from a read made after it called:
// never the replica's cached state from before a change that was complete
// when Observe was called (here: a release through the other replica,
// confirmed to its holder), which the replica's other observers may not
// have heard of yet.
TEST_F(ObserveTest, ANewObserversFirstStateIsNeverOlderThanItsCall) {
  const std::string name = "fresh-first";
  ObserveStream old_hand(s1_.get(), name);  // keeps the replica's cache warm
  ASSERT_TRUE(old_hand.AwaitEvent(NoLeader));
  int stale = 0;
  for (int round = 0; round < 30; ++round) {
    AcquireStream holder(s2_.get(), Candidate(name, "h", absl::StrCat("v", round)));
    auto acq = holder.Await(AcquireEvent::ACQUIRED);
    ASSERT_TRUE(acq);
    const uint64_t token = acq->acquired().fencing_token();
    ASSERT_TRUE(old_hand.AwaitEvent([&](const ObserveEvent& e) { return LeaderIs(e, token); },
                                    old_hand.size() - 1));
    holder.SendRelease();
    ASSERT_TRUE(holder.Await(AcquireEvent::RELEASED));
    ObserveStream fresh(s1_.get(), name);
    auto first = fresh.AwaitEvent([](const ObserveEvent&) { return true; });
    ASSERT_TRUE(first);
    const ObserveEvent e = fresh.events()[*first].event;
    if (!NoLeader(e)) ++stale;
    ASSERT_TRUE(old_hand.AwaitEvent(NoLeader, old_hand.size() - 1));
  }
  EXPECT_EQ(stale, 0) << "first states older than the call, of 30";
}

// A lock nobody holds is observed as empty; its creation later is seen
// (the existence watch), as is every later change; the waiter count too.
TEST_F(ObserveTest, AnEmptyLockIsObservedAndItsFirstHolderSeen) {
  const std::string name = "later";
  ObserveStream watcher(s1_.get(), name);
  ASSERT_TRUE(watcher.AwaitEvent(NoLeader));
  AcquireStream a(s2_.get(), Candidate(name, "a", "1"));
  auto acq = a.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq);
  const uint64_t token = acq->acquired().fencing_token();
  ASSERT_TRUE(watcher.AwaitEvent([&](const ObserveEvent& e) {
    return LeaderIs(e, token) && e.holders(0).owner() == "a" && e.waiters() == 0;
  }));
  AcquireStream b(s1_.get(), Candidate(name, "b", "2"));
  ASSERT_TRUE(b.Await(AcquireEvent::QUEUED));
  ASSERT_TRUE(watcher.AwaitEvent(
      [&](const ObserveEvent& e) { return LeaderIs(e, token) && e.waiters() == 1; }));
  a.SendRelease();
  auto acq_b = b.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq_b);
  auto at = watcher.AwaitEvent([&](const ObserveEvent& e) {
    return LeaderIs(e, acq_b->acquired().fencing_token()) && e.waiters() == 0;
  });
  ASSERT_TRUE(at);
  // The grant happened while this replica observed: its time is known.
  EXPECT_TRUE(watcher.events()[*at].event.holders(0).has_granted());
  // Sequence numbers increase by one.
  auto events = watcher.events();
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].event.sequence(), i + 1);
  }
}

// A replica whose session expires tells its observers UNKNOWN, then the
// fresh state; its watches are re-armed, so later changes are seen too.
TEST_F(ObserveTest, ASessionExpiryIsToldAsUnknownThenTheFreshState) {
  const std::string name = "expiry";
  AcquireStream a(s2_.get(), Candidate(name, "a", "1"));
  auto acq = a.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq);
  ObserveStream watcher(s1_.get(), name);
  ASSERT_TRUE(watcher.AwaitEvent(
      [&](const ObserveEvent& e) { return LeaderIs(e, acq->acquired().fencing_token()); }));
  ASSERT_TRUE(ExpireReplicaSession(connect_, *r1_, r1_->engine().SessionIndexOf(name)));
  auto unknown = watcher.AwaitEvent(
      [](const ObserveEvent& e) { return e.state() == ObserveEvent::UNKNOWN; });
  ASSERT_TRUE(unknown);
  EXPECT_EQ(watcher.events()[*unknown].event.holders_size(), 0);
  ASSERT_TRUE(watcher.AwaitEvent(
      [&](const ObserveEvent& e) { return LeaderIs(e, acq->acquired().fencing_token()); },
      *unknown));
  // Watches were re-armed on the new session: a change is seen.
  AcquireStream b(s2_.get(), Candidate(name, "b", "2"));
  ASSERT_TRUE(b.Await(AcquireEvent::QUEUED));
  a.SendRelease();
  auto acq_b = b.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq_b);
  ASSERT_TRUE(watcher.AwaitEvent(
      [&](const ObserveEvent& e) { return LeaderIs(e, acq_b->acquired().fencing_token()); },
      *unknown));
}

// ZooKeeper itself restarts: observers are told UNKNOWN, then CURRENT.
TEST_F(ObserveTest, AZooKeeperRestartIsToldAsUnknownThenCurrent) {
  auto server = ZkServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ReplicaConfig cfg = TestConfig((*server)->ConnectString(), UniqueRoot("observe-restart"));
  cfg.zk_session_timeout = milliseconds(20000);
  auto x = StartReplica(cfg);
  ASSERT_TRUE(x);
  auto xs = NewStub(x->address());
  AcquireStream a(xs.get(), Candidate("restart", "a", "1"));
  auto acq = a.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq);
  ObserveStream watcher(xs.get(), "restart");
  ASSERT_TRUE(watcher.AwaitEvent(
      [&](const ObserveEvent& e) { return LeaderIs(e, acq->acquired().fencing_token()); }));
  ASSERT_TRUE((*server)->Stop().ok());
  auto is_unknown = [](const ObserveEvent& e) { return e.state() == ObserveEvent::UNKNOWN; };
  auto unknown = watcher.AwaitEvent(is_unknown);
  ASSERT_TRUE(unknown);
  // Observers that come during the outage (of this lock, and of one never
  // observed here) are told UNKNOWN first, not made to wait for ZooKeeper.
  ObserveStream late(xs.get(), "restart");
  ObserveStream other(xs.get(), "never-seen");
  for (ObserveStream* o : {&late, &other}) {
    auto first = o->AwaitEvent([](const ObserveEvent&) { return true; });
    ASSERT_TRUE(first);
    EXPECT_TRUE(is_unknown(o->events()[*first].event)) << o->events()[*first].event.DebugString();
  }
  ASSERT_TRUE((*server)->Restart().ok());
  for (ObserveStream* o : {&watcher, &late}) {
    ASSERT_TRUE(o->AwaitEvent(
        [&](const ObserveEvent& e) { return LeaderIs(e, acq->acquired().fencing_token()); },
        o == &watcher ? *unknown : 0, milliseconds(30000)));
  }
  ASSERT_TRUE(other.AwaitEvent(NoLeader, 0, milliseconds(30000)));
}

// A draining replica ends its observers' streams with UNAVAILABLE, and bad
// names are INVALID_ARGUMENT.
TEST_F(ObserveTest, DrainEndsObserversWithUnavailableAndBadNamesAreInvalid) {
  ObserveStream bad(s1_.get(), "");
  auto st = bad.AwaitEnd();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ObserveStream watcher(s1_.get(), "drained");
  ASSERT_TRUE(watcher.AwaitEvent(NoLeader));
  r1_->Drain();
  st = watcher.AwaitEnd();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->error_code(), grpc::StatusCode::UNAVAILABLE) << st->error_message();
}

}  // namespace
}  // namespace turnstile::testing
