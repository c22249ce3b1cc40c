// Tests of the C++ client library (client/lib/client.h) against two
// in-process replicas on a real ZooKeeper (the shared fixture server). Every
// wait has a deadline; the only plain sleep is a bounded hold time.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "client/lib/client.h"
#include "server/recipe/lock_name.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

namespace tc = ::turnstile::client;
using std::chrono::steady_clock;

// Records on_change calls; waits for one with a deadline. Thread-safe.
class Changes {
 public:
  std::function<void(const tc::LockStatus&)> Callback() {
    return [this](const tc::LockStatus& s) {
      std::lock_guard<std::mutex> l(mu_);
      seen_.push_back(s);
      cv_.notify_all();
    };
  }
  // The first change to `state` (seen before or within `timeout`).
  std::optional<tc::LockStatus> Await(tc::LockState state, milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    std::optional<tc::LockStatus> found;
    cv_.wait_for(l, timeout, [&] {
      for (const auto& s : seen_) {
        if (s.state == state) {
          found = s;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  std::vector<tc::LockStatus> seen() const {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<tc::LockStatus> seen_;  // GUARDED_BY(mu_)
};

// Records on_queued positions. Thread-safe.
class Positions {
 public:
  std::function<void(int64_t)> Callback() {
    return [this](int64_t p) {
      std::lock_guard<std::mutex> l(mu_);
      seen_.push_back(p);
      cv_.notify_all();
    };
  }
  bool AwaitAny(milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [&] { return !seen_.empty(); });
  }
  std::vector<int64_t> seen() const {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> seen_;  // GUARDED_BY(mu_)
};

tc::AcquireOptions Opts(milliseconds wait, const std::string& owner = "",
                        milliseconds ttl = milliseconds(0)) {
  tc::AcquireOptions o;
  o.wait_timeout = wait;
  o.owner = owner;
  o.ttl = ttl;
  return o;
}

// Waits (bounded) for an async Acquire's result.
absl::StatusOr<tc::Lock> Get(std::future<absl::StatusOr<tc::Lock>>& f,
                             milliseconds timeout = milliseconds(20000)) {
  if (f.wait_for(timeout) != std::future_status::ready) {
    return absl::DeadlineExceededError("the test's Acquire did not return in time");
  }
  return f.get();
}

class ClientLibTest : public ::testing::Test {
 protected:
  void SetUp() override {
    zk_connect_ = SharedZkServer().ConnectString();
    root_ = UniqueRoot("clib");
    r1_ = StartReplica(TestConfig(zk_connect_, root_));
    r2_ = StartReplica(TestConfig(zk_connect_, root_));
    ASSERT_TRUE(r1_ && r2_);
    zk_ = std::make_unique<SyncZk>(zk_connect_);
    c1_ = Connect(r1_->address());
    c2_ = Connect(r2_->address());
    ASSERT_TRUE(c1_ && c2_);
  }

  static std::unique_ptr<tc::Client> Connect(const std::string& address) {
    tc::ClientOptions o;
    o.target = address;
    o.default_owner = "client-lib-test";
    auto c = tc::Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  std::string LockPath(const std::string& name) { return root_ + "/" + EncodeLockName(name); }
  size_t Contenders(const std::string& name) { return zk_->Contenders(LockPath(name)).size(); }
  bool ContendersBecome(const std::string& name, size_t n,
                        milliseconds timeout = milliseconds(15000)) {
    return WaitFor([&] { return Contenders(name) == n; }, timeout);
  }

  std::string zk_connect_, root_;
  std::unique_ptr<Replica> r1_, r2_;
  std::unique_ptr<SyncZk> zk_;
  // Declared after the replicas: destroyed (and their locks released) first.
  std::unique_ptr<tc::Client> c1_, c2_;
};

// (a) A Lock going out of scope releases: the waiter gets it, and no node is
// left behind. Release waits for RELEASED, which the server sends after the
// node is deleted, so the node is gone as soon as the destructor returns.
TEST_F(ClientLibTest, LockReleasesWhenItGoesOutOfScope) {
  Positions queued;
  std::future<absl::StatusOr<tc::Lock>> waiter;
  uint64_t first_token = 0;
  {
    auto held = c1_->Acquire("raii", Opts(milliseconds(5000), "first"));
    ASSERT_TRUE(held.ok()) << held.status();
    EXPECT_EQ(held->name(), "raii");
    EXPECT_FALSE(held->lease_id().empty());
    EXPECT_GT(held->fencing_token(), 0u);
    EXPECT_EQ(held->hold_count(), 1);
    tc::LockStatus st = held->status();
    EXPECT_EQ(st.state, tc::LockState::kHeld);
    // No TTL, not suspended: valid as long as the replica's latest refresh
    // says (about a session timeout), never "forever".
    EXPECT_GT(st.valid_for, tc::Millis(0));
    EXPECT_LE(st.valid_for, tc::Millis(60000));
    first_token = held->fencing_token();
    EXPECT_EQ(Contenders("raii"), 1u);

    waiter = std::async(std::launch::async, [&] {
      auto o = Opts(milliseconds(5000), "second");
      o.on_queued = queued.Callback();
      return c2_->Acquire("raii", o);
    });
    ASSERT_TRUE(queued.AwaitAny(milliseconds(10000)));

    // Moving keeps the hold; the moved-from handle releases nothing.
    tc::Lock moved = std::move(*held);
    EXPECT_EQ(held->status().state, tc::LockState::kReleased);
    EXPECT_TRUE(held->Release().ok());
    EXPECT_EQ(moved.status().state, tc::LockState::kHeld);
    EXPECT_EQ(moved.fencing_token(), first_token);
    EXPECT_EQ(Contenders("raii"), 2u);
  }  // `moved` is destroyed here: released.
  EXPECT_EQ(Contenders("raii"), 1u);  // only the waiter's node

  auto next = Get(waiter);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_GT(next->fencing_token(), first_token);
  EXPECT_EQ(queued.seen().front(), 1);
  ASSERT_TRUE(next->Release().ok());
  EXPECT_EQ(next->status().state, tc::LockState::kReleased);
  EXPECT_EQ(next->status().valid_for, tc::Millis(0));
  EXPECT_EQ(Contenders("raii"), 0u);
  EXPECT_TRUE(next->Release().ok());  // idempotent
}

// (b) A TTL lease is kept alive by the library alone for 4x its TTL.
TEST_F(ClientLibTest, KeepsTtlLeaseAliveByItself) {
  Changes changes;
  auto o = Opts(milliseconds(5000), "ttl-holder", milliseconds(800));
  o.on_change = changes.Callback();
  auto held = c1_->Acquire("ttl", o);
  ASSERT_TRUE(held.ok()) << held.status();
  tc::LockStatus st = held->status();
  EXPECT_EQ(st.state, tc::LockState::kHeld);
  EXPECT_GT(st.valid_for, tc::Millis(0));
  EXPECT_LE(st.valid_for, tc::Millis(800));

  Positions queued;
  std::atomic<bool> waiter_returned{false};
  auto waiter = std::async(std::launch::async, [&] {
    auto wo = Opts(milliseconds(30000), "ttl-waiter");
    wo.on_queued = queued.Callback();
    auto r = c2_->Acquire("ttl", wo);
    waiter_returned = true;
    return r;
  });
  ASSERT_TRUE(queued.AwaitAny(milliseconds(10000)));

  // A plain bounded hold: 4x the TTL, the test does nothing.
  std::this_thread::sleep_for(milliseconds(3200));

  st = held->status();
  EXPECT_EQ(st.state, tc::LockState::kHeld) << st.lost_reason << ": " << st.message;
  EXPECT_GT(st.valid_for, tc::Millis(0));
  EXPECT_LE(st.valid_for, tc::Millis(800));
  EXPECT_TRUE(changes.seen().empty()) << "unexpected change to "
                                      << tc::LockStateName(changes.seen().front().state);
  EXPECT_FALSE(waiter_returned.load());
  EXPECT_EQ(Contenders("ttl"), 2u);

  ASSERT_TRUE(held->Release().ok());
  auto rel = changes.Await(tc::LockState::kReleased, milliseconds(0));  // before Release returned
  ASSERT_TRUE(rel);
  EXPECT_EQ(rel->valid_for, tc::Millis(0));
  auto next = Get(waiter);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_GT(next->fencing_token(), held->fencing_token());
  EXPECT_TRUE(changes.Await(tc::LockState::kLost, milliseconds(0)) == std::nullopt);
}

// (c1) Revoked by a Release of its lease id through the other replica: LOST,
// reason DELETED.
TEST_F(ClientLibTest, ReportsLostWhenLeaseIsReleasedElsewhere) {
  Changes changes;
  auto o = Opts(milliseconds(5000), "victim");
  o.on_change = changes.Callback();
  auto held = c1_->Acquire("revoke", o);
  ASSERT_TRUE(held.ok()) << held.status();
  const std::string lease = held->lease_id();

  ASSERT_TRUE(c2_->Release(lease).ok());
  auto lost = changes.Await(tc::LockState::kLost, milliseconds(10000));
  ASSERT_TRUE(lost) << "no kLost";
  EXPECT_EQ(lost->lost_reason, "DELETED");
  EXPECT_EQ(lost->valid_for, tc::Millis(0));
  tc::LockStatus st = held->status();
  EXPECT_EQ(st.state, tc::LockState::kLost);
  EXPECT_EQ(st.lost_reason, "DELETED");
  EXPECT_EQ(st.valid_for, tc::Millis(0));
  EXPECT_EQ(held->hold_count(), 1);

  // After LOST, Release is OK without the server and the state stays lost.
  EXPECT_TRUE(held->Release().ok());
  EXPECT_EQ(held->status().state, tc::LockState::kLost);
  EXPECT_EQ(held->status().lost_reason, "DELETED");
  EXPECT_EQ(changes.seen().size(), 1u);
  // The lease is gone: a second Release by id is NOT_FOUND.
  EXPECT_EQ(c2_->Release(lease).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Contenders("revoke"), 0u);
}

// (c2) The holder's replica dies: LOST (the stream broke), and the lock is
// free again.
TEST_F(ClientLibTest, ReportsLostWhenReplicaDies) {
  auto r3 = StartReplica(TestConfig(zk_connect_, root_));
  ASSERT_TRUE(r3);
  auto c3 = Connect(r3->address());
  ASSERT_TRUE(c3);
  Changes changes;
  auto o = Opts(milliseconds(5000), "doomed");
  o.on_change = changes.Callback();
  auto held = c3->Acquire("die", o);
  ASSERT_TRUE(held.ok()) << held.status();

  r3.reset();  // stops at once, no drain
  auto lost = changes.Await(tc::LockState::kLost, milliseconds(15000));
  ASSERT_TRUE(lost) << "no kLost";
  EXPECT_TRUE(lost->lost_reason == "CONNECTION" || lost->lost_reason == "SHUTDOWN" ||
              lost->lost_reason == "SESSION_EXPIRED")
      << lost->lost_reason << ": " << lost->message;
  EXPECT_EQ(held->status().state, tc::LockState::kLost);
  EXPECT_EQ(held->status().valid_for, tc::Millis(0));
  RecordProperty("lost_reason", lost->lost_reason);
  RecordProperty("lost_message", lost->message);

  // Its node went with the replica's session.
  auto next = c1_->Acquire("die", Opts(milliseconds(15000), "survivor"));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(held->Release().ok());
}

// Issue 11: a frozen replica leaves its holder blind (it cannot send even
// SUSPENDED). The server refreshes a holder's validity on its stream
// (STILL_HELD, every fifth of the session timeout); the client treats a hold
// whose refresh is overdue as kSuspended and as kLost when the validity it
// was last given runs out, and that is before the lock can be granted to
// anyone else (the replica's session must expire first).
TEST_F(ClientLibTest, AFrozenReplicasHolderStopsBeforeTheLockMovesOn) {
  auto proc = SpawnReplicaProcess({"--zk", zk_connect_, "--zk-root", root_, "--zk-session-timeout", "2s"});
  ASSERT_TRUE(proc);
  ChildProcess* child = proc->process.get();
  auto c = Connect(proc->address);
  ASSERT_TRUE(c);

  std::mutex mu;
  std::vector<std::pair<steady_clock::time_point, tc::LockStatus>> changes;
  auto o = Opts(milliseconds(5000), "frozen-holder");
  o.on_change = [&](const tc::LockStatus& s) {
    std::lock_guard<std::mutex> l(mu);
    changes.emplace_back(steady_clock::now(), s);
  };
  auto held = c->Acquire("frozen", o);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_GT(held->status().valid_for, tc::Millis(0));
  EXPECT_LE(held->status().valid_for, tc::Millis(2000));
  // Refreshes keep it held past the session timeout: an observation period
  // (nothing is awaited), then no change may have happened.
  std::this_thread::sleep_for(milliseconds(3000));
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_TRUE(changes.empty()) << changes.front().second.message;
  }
  EXPECT_EQ(held->status().state, tc::LockState::kHeld);
  EXPECT_GT(held->status().valid_for, tc::Millis(0));

  std::atomic<int64_t> granted_at{0};
  auto waiter = std::async(std::launch::async, [&] {
    auto w = c2_->Acquire("frozen", Opts(milliseconds(30000), "next"));
    granted_at = steady_clock::now().time_since_epoch().count();
    return w;
  });
  ASSERT_TRUE(ContendersBecome("frozen", 2));

  const auto frozen = steady_clock::now();
  child->Signal(SIGSTOP);
  auto find = [&](tc::LockState state) -> std::optional<std::pair<steady_clock::time_point, tc::LockStatus>> {
    std::lock_guard<std::mutex> l(mu);
    for (const auto& ch : changes) {
      if (ch.second.state == state) return ch;
    }
    return std::nullopt;
  };
  ASSERT_TRUE(WaitFor([&] { return find(tc::LockState::kLost).has_value(); }, milliseconds(10000)));
  auto suspended = find(tc::LockState::kSuspended);
  ASSERT_TRUE(suspended) << "kLost without kSuspended first";
  EXPECT_NE(suspended->second.message.find("no refresh"), std::string::npos) << suspended->second.message;
  EXPECT_LE(suspended->first - frozen, milliseconds(1200 + 500));  // refresh_within + slack
  auto lost = find(tc::LockState::kLost);
  EXPECT_EQ(lost->second.lost_reason, "REFRESH_OVERDUE");
  EXPECT_EQ(held->status().state, tc::LockState::kLost);

  auto next = waiter.get();
  ASSERT_TRUE(next.ok()) << next.status();
  const steady_clock::time_point next_at{steady_clock::duration(granted_at.load())};
  EXPECT_LT(lost->first, next_at) << "the frozen replica's holder stopped "
                                  << std::chrono::duration_cast<milliseconds>(lost->first - next_at).count()
                                  << " ms after the next holder was granted";
  EXPECT_GT(next->fencing_token(), held->fencing_token());
  child->Signal(SIGCONT);
  child->Signal(SIGTERM);
  EXPECT_TRUE(child->Wait(milliseconds(10000)));
}

// Issue 12: Client::Revoke through the other replica reaches the holder's
// on_revoke with the requester (the revoking client's default owner) and
// reason; the hold is unaffected until the holder decides.
TEST_F(ClientLibTest, OnRevokeHearsWhoAskedAndWhy) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<std::string, std::string>> asked;
  auto o = Opts(milliseconds(5000), "revocable");
  o.on_revoke = [&](const std::string& requester, const std::string& reason) {
    std::lock_guard<std::mutex> l(mu);
    asked.emplace_back(requester, reason);
    cv.notify_all();
  };
  auto held = c1_->Acquire("revocable", o);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE(c2_->Revoke(held->lease_id(), "rolling upgrade").ok());
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, milliseconds(10000), [&] { return !asked.empty(); }));
    // With mutual TLS the holder hears who really asked, beside the label.
    EXPECT_EQ(asked[0].first, MtlsMode() ? absl::StrCat(kMtlsSuiteIdentity,
                                                        " (says \"client-lib-test\")")
                                         : "client-lib-test");
    EXPECT_EQ(asked[0].second, "rolling upgrade");
  }
  EXPECT_EQ(held->status().state, tc::LockState::kHeld);
  EXPECT_TRUE(held->Release().ok());
  EXPECT_EQ(c2_->Revoke(held->lease_id(), "late").code(), absl::StatusCode::kNotFound);
}

// Issue 12: AcquireOptions::lock_delay. The hold is released by lease id
// through the other replica (an involuntary end for the holder): the next
// Acquire is granted no sooner than the delay after that.
TEST_F(ClientLibTest, LockDelayAfterAReleaseByLeaseId) {
  auto o = Opts(milliseconds(5000), "delayed");
  o.lock_delay = milliseconds(1500);
  auto held = c1_->Acquire("c-delay", o);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE(c2_->Release(held->lease_id()).ok());
  const auto released = steady_clock::now();
  auto next = c2_->Acquire("c-delay", Opts(milliseconds(10000), "next"));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_GE(steady_clock::now() - released, milliseconds(1400));
  EXPECT_EQ(held->status().state, tc::LockState::kLost);
}

// The replica loses ZooKeeper (its own server, stopped and restarted):
// kSuspended with a shrinking valid_for, then kHeld again on resume.
TEST_F(ClientLibTest, ReportsSuspendedAndResumed) {
  auto server = ZkServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ReplicaConfig cfg = TestConfig((*server)->ConnectString(), root_);
  cfg.zk_session_timeout = milliseconds(20000);
  auto r = StartReplica(cfg);
  ASSERT_TRUE(r);
  auto c = Connect(r->address());
  ASSERT_TRUE(c);
  Changes changes;
  auto o = Opts(milliseconds(5000), "suspense");
  o.on_change = changes.Callback();
  auto held = c->Acquire("suspend", o);
  ASSERT_TRUE(held.ok()) << held.status();

  ASSERT_TRUE((*server)->Stop().ok());
  auto suspended = changes.Await(tc::LockState::kSuspended, milliseconds(20000));
  ASSERT_TRUE(suspended) << "no kSuspended";
  EXPECT_GT(suspended->valid_for, tc::Millis(0));
  EXPECT_LE(suspended->valid_for, tc::Millis(20000));
  tc::LockStatus st1 = held->status();
  EXPECT_EQ(st1.state, tc::LockState::kSuspended);
  std::this_thread::sleep_for(milliseconds(200));  // a bounded pause, not a wait for an event
  tc::LockStatus st2 = held->status();
  if (st2.state == tc::LockState::kSuspended) {
    EXPECT_LE(st2.valid_for, st1.valid_for - tc::Millis(150));
  }

  ASSERT_TRUE((*server)->Restart().ok());
  auto resumed = changes.Await(tc::LockState::kHeld, milliseconds(30000));
  ASSERT_TRUE(resumed) << "no kHeld after the suspension";
  EXPECT_GT(resumed->valid_for, tc::Millis(0));  // the validity RESUMED carries
  EXPECT_LE(resumed->valid_for, tc::Millis(20000));
  EXPECT_EQ(held->status().state, tc::LockState::kHeld);
  EXPECT_TRUE(changes.Await(tc::LockState::kLost, milliseconds(0)) == std::nullopt);
  EXPECT_TRUE(held->Release().ok());
  EXPECT_EQ(held->status().state, tc::LockState::kReleased);
}

// Release from inside on_change (a library thread) neither deadlocks nor
// waits for itself.
TEST_F(ClientLibTest, ReleaseFromInsideCallback) {
  std::mutex mu;
  std::condition_variable cv;
  tc::Lock* target = nullptr;
  std::optional<absl::Status> released;
  auto o = Opts(milliseconds(5000), "cb");
  o.on_change = [&](const tc::LockStatus& s) {
    if (s.state != tc::LockState::kLost) return;
    std::lock_guard<std::mutex> l(mu);
    if (target) released = target->Release();
    cv.notify_all();
  };
  auto held = c1_->Acquire("cb", o);
  ASSERT_TRUE(held.ok()) << held.status();
  {
    std::lock_guard<std::mutex> l(mu);
    target = &*held;
  }
  ASSERT_TRUE(c2_->Release(held->lease_id()).ok());
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, milliseconds(10000), [&] { return released.has_value(); }));
  EXPECT_TRUE(released->ok()) << *released;
  EXPECT_EQ(held->status().state, tc::LockState::kLost);
}

// A Release made on the library's thread (from on_revoke, as the election
// helper does) does not wait; a second Release off that thread must, so that
// when it returns every callback of the handle has run: the caller may then
// destroy what the callbacks point to. (`turnstile elect` crashed on a late
// kReleased delivered into its destroyed Election.)
TEST_F(ClientLibTest, ASecondReleaseWaitsForWhatAReleaseInACallbackDidNot) {
  std::mutex mu;
  std::condition_variable cv;
  tc::Lock* target = nullptr;
  bool released_in_callback = false;
  bool told_released = false;
  auto o = Opts(milliseconds(5000), "cb2");
  o.on_revoke = [&](const std::string&, const std::string&) {
    std::lock_guard<std::mutex> l(mu);
    if (target) EXPECT_TRUE(target->Release().ok());
    released_in_callback = true;
    cv.notify_all();
  };
  o.on_change = [&](const tc::LockStatus& s) {
    std::lock_guard<std::mutex> l(mu);
    if (s.state == tc::LockState::kReleased) told_released = true;
  };
  auto held = c1_->Acquire("cb2", o);
  ASSERT_TRUE(held.ok()) << held.status();
  {
    std::lock_guard<std::mutex> l(mu);
    target = &*held;
  }
  ASSERT_TRUE(c2_->Revoke(held->lease_id(), "step down").ok());
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, milliseconds(10000), [&] { return released_in_callback; }));
  }
  EXPECT_TRUE(held->Release().ok());
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_TRUE(told_released) << "Release returned before kReleased was delivered";
  }
  EXPECT_EQ(held->status().state, tc::LockState::kReleased);
}

// (d) Reentrant acquires share one hold: same token and lease, one node;
// the server-side release happens with the last handle.
TEST_F(ClientLibTest, ReentrantHandlesShareOneHold) {
  auto o = Opts(milliseconds(5000), "me");
  o.reentrant = true;
  Changes first_changes;
  auto o1 = o;
  o1.on_change = first_changes.Callback();
  auto a = c1_->Acquire("re", o1);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = c1_->Acquire("re", o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->fencing_token(), b->fencing_token());
  EXPECT_EQ(a->lease_id(), b->lease_id());
  EXPECT_EQ(a->hold_count(), 2);
  EXPECT_EQ(b->hold_count(), 2);
  EXPECT_EQ(Contenders("re"), 1u);

  // Another Client (even with the same owner) does not share it.
  auto other_opts = Opts(milliseconds(0), "me");
  other_opts.reentrant = true;
  auto other = c2_->Acquire("re", other_opts);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition) << other.status();

  // Releasing one handle keeps the hold.
  ASSERT_TRUE(a->Release().ok());
  EXPECT_EQ(a->status().state, tc::LockState::kReleased);
  EXPECT_EQ(a->hold_count(), 0);
  EXPECT_TRUE(first_changes.Await(tc::LockState::kReleased, milliseconds(0)));
  EXPECT_EQ(b->status().state, tc::LockState::kHeld);
  EXPECT_EQ(b->hold_count(), 1);
  // The failed try-once above may still be deleting its node: the server
  // answers FAILED_PRECONDITION without waiting for that delete.
  EXPECT_TRUE(ContendersBecome("re", 1));
  other = c2_->Acquire("re", Opts(milliseconds(0)));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition) << other.status();

  // Releasing the last handle releases the lock.
  ASSERT_TRUE(b->Release().ok());
  EXPECT_EQ(b->status().state, tc::LockState::kReleased);
  // b's node is gone (RELEASED comes after its delete); c2's failed
  // try-once above may still be deleting its own.
  EXPECT_TRUE(ContendersBecome("re", 0));
  other = c2_->Acquire("re", Opts(milliseconds(0)));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_GT(other->fencing_token(), a->fencing_token());
  // c1 no longer holds it: a reentrant try-once there fails (nothing stale).
  auto again = c1_->Acquire("re", Opts(milliseconds(0), "me"));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition) << again.status();
}

// (d) Without `reentrant` the same Client queues behind itself.
TEST_F(ClientLibTest, NonReentrantAcquireQueuesBehindItself) {
  auto a = c1_->Acquire("self", Opts(milliseconds(5000), "me"));
  ASSERT_TRUE(a.ok()) << a.status();
  auto start = steady_clock::now();
  auto b = c1_->Acquire("self", Opts(milliseconds(300), "me"));
  EXPECT_EQ(b.status().code(), absl::StatusCode::kDeadlineExceeded) << b.status();
  EXPECT_GE(steady_clock::now() - start, milliseconds(300));
  // A reentrant acquire does not share a hold taken without `reentrant`.
  auto ro = Opts(milliseconds(300), "me");
  ro.reentrant = true;
  auto c = c1_->Acquire("self", ro);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_TRUE(ContendersBecome("self", 1));
  EXPECT_EQ(a->status().state, tc::LockState::kHeld);
  EXPECT_EQ(a->hold_count(), 1);
}

// (e) Failed waits map to the documented codes; on_queued reports position 1
// for a single waiter, before Acquire returns.
TEST_F(ClientLibTest, TryOnceAndWaitTimeoutCodes) {
  auto holder = c1_->Acquire("busy", Opts(milliseconds(5000), "holder"));
  ASSERT_TRUE(holder.ok()) << holder.status();

  auto once = c2_->Acquire("busy", Opts(milliseconds(0)));
  EXPECT_EQ(once.status().code(), absl::StatusCode::kFailedPrecondition) << once.status();
  EXPECT_FALSE(once.status().message().empty());

  Positions queued;
  auto o = Opts(milliseconds(300));
  o.on_queued = queued.Callback();
  auto start = steady_clock::now();
  auto timed = c2_->Acquire("busy", o);
  EXPECT_EQ(timed.status().code(), absl::StatusCode::kDeadlineExceeded) << timed.status();
  EXPECT_GE(steady_clock::now() - start, milliseconds(300));
  EXPECT_EQ(queued.seen(), std::vector<int64_t>{1});
  EXPECT_TRUE(ContendersBecome("busy", 1));

  // The server's other errors come through with their code.
  EXPECT_EQ(c2_->Acquire("", Opts(milliseconds(0))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c2_->Acquire("x", Opts(milliseconds(0), "", milliseconds(100))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c2_->Release("garbage").code(), absl::StatusCode::kInvalidArgument);

  // Nobody listening: UNAVAILABLE.
  auto nowhere = Connect("127.0.0.1:1");
  ASSERT_TRUE(nowhere);
  EXPECT_EQ(nowhere->Acquire("busy", Opts(milliseconds(0))).status().code(),
            absl::StatusCode::kUnavailable);

  // A free lock is taken by try-once.
  ASSERT_TRUE(holder->Release().ok());
  auto free_once = c2_->Acquire("busy", Opts(milliseconds(0)));
  EXPECT_TRUE(free_once.ok()) << free_once.status();
}

// Issue 21: AcquireOptions.max_holders: N permits through the library,
// the N + 1st waits (position 1: next in line) and holds once a permit is
// released; tokens grow in grant order; another N is refused.
TEST_F(ClientLibTest, SemaphorePermits) {
  auto sem = [](milliseconds wait, const std::string& owner, int32_t n = 2) {
    auto o = Opts(wait, owner);
    o.max_holders = n;
    return o;
  };
  auto first = c1_->Acquire("permits", sem(milliseconds(5000), "first"));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = c2_->Acquire("permits", sem(milliseconds(5000), "second"));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(second->fencing_token(), first->fencing_token());
  auto full = c2_->Acquire("permits", sem(milliseconds(0), "third"));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kFailedPrecondition) << full.status();
  EXPECT_NE(full.status().message().find("all 2 permits held"), std::string::npos)
      << full.status();
  auto other = c1_->Acquire("permits", sem(milliseconds(5000), "other", 3));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition) << other.status();
  EXPECT_TRUE(ContendersBecome("permits", 2));

  Positions queued;
  std::future<absl::StatusOr<tc::Lock>> waiter = std::async(std::launch::async, [&] {
    auto o = sem(milliseconds(10000), "third");
    o.on_queued = queued.Callback();
    return c1_->Acquire("permits", o);
  });
  ASSERT_TRUE(queued.AwaitAny(milliseconds(10000)));
  EXPECT_EQ(queued.seen().front(), 1);
  ASSERT_TRUE(first->Release().ok());  // out of grant order would do as well
  auto third = Get(waiter);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_GT(third->fencing_token(), second->fencing_token());
  ASSERT_TRUE(second->Release().ok());
  ASSERT_TRUE(third->Release().ok());
  EXPECT_TRUE(ContendersBecome("permits", 0));
}

// A waiter whose replica drains (rolling restart) is told UNAVAILABLE; the
// library opens the wait again until its timeout, and through a target that
// lists several replicas the retry reaches a live one. With retries off the
// UNAVAILABLE reaches the caller.
TEST_F(ClientLibTest, WaitSurvivesADrainingReplicaThroughAMultiReplicaTarget) {
  auto holder = c2_->Acquire("roll", Opts(milliseconds(0), "holder"));
  ASSERT_TRUE(holder.ok()) << holder.status();

  for (bool retry : {false, true}) {
    SCOPED_TRACE(retry ? "retry_unavailable" : "no retries");
    auto doomed = StartReplica(TestConfig(zk_connect_, root_));
    ASSERT_TRUE(doomed);
    // pick_first over [doomed, r2]: calls go to `doomed` while it is up.
    tc::ClientOptions o;
    o.target = absl::StrCat("ipv4:", doomed->address(), ",", r2_->address());
    if (MtlsMode()) o.tls_server_name = "localhost";  // two addresses, one certificate
    o.default_owner = "roller";
    o.retry_unavailable = retry;
    auto client = tc::Client::Connect(o);
    ASSERT_TRUE(client.ok()) << client.status();
    Positions queued;
    auto opts = Opts(milliseconds(30000), "roller");
    opts.on_queued = queued.Callback();
    auto waiter = std::async(std::launch::async, [&] { return (*client)->Acquire("roll", opts); });
    ASSERT_TRUE(ContendersBecome("roll", 2));
    auto before = zk_->Contenders(LockPath("roll"));
    std::sort(before.begin(), before.end());
    doomed->Drain();  // no holders there: NOT_SERVING, waiters UNAVAILABLE, session closed
    if (!retry) {
      auto got = Get(waiter);
      EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
      EXPECT_TRUE(ContendersBecome("roll", 1));
      continue;
    }
    // The retry queues again (a new node) through r2; the release hands it over.
    ASSERT_TRUE(WaitFor([&] {
      auto nodes = zk_->Contenders(LockPath("roll"));
      std::sort(nodes.begin(), nodes.end());
      return nodes.size() == 2 && nodes != before;
    }, milliseconds(15000)));
    EXPECT_EQ(waiter.wait_for(milliseconds(0)), std::future_status::timeout) << "still waiting";
    ASSERT_TRUE(holder->Release().ok());
    auto got = Get(waiter);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_GT(got->fencing_token(), holder->fencing_token());
    ASSERT_TRUE(got->Release().ok());
    EXPECT_TRUE(ContendersBecome("roll", 0));
  }
}

// The process's threads, from /proc/self/task (one entry per thread).
size_t ThreadCount() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// A hold costs no thread: 50 holds through one Client (half of them TTL
// leases, renewed by KeepAlive meanwhile) leave the process's thread count
// where one hold put it, give or take a few of gRPC's shared threads. The
// replicas run in this process too; their streams cost no thread either.
TEST_F(ClientLibTest, HoldsCostNoThreads) {
  // gRPC's threads and the library's own thread start with the first hold,
  // once per process: counted before the 50.
  {
    auto first = c1_->Acquire("threads-first", Opts(milliseconds(5000), "threads", milliseconds(1000)));
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE(first->Release().ok());
  }
  const size_t before = ThreadCount();
  constexpr int kHolds = 50;
  const milliseconds ttl(1000);
  std::vector<tc::Lock> holds;
  std::vector<steady_clock::time_point> granted;
  for (int i = 0; i < kHolds; ++i) {
    auto held = c1_->Acquire(absl::StrCat("threads-", i),
                             Opts(milliseconds(5000), "threads", i % 2 == 0 ? milliseconds(0) : ttl));
    ASSERT_TRUE(held.ok()) << i << ": " << held.status();
    granted.push_back(steady_clock::now());
    holds.push_back(std::move(*held));
  }
  // Renewed: valid beyond the grant's TTL (renewals go out every ttl/3).
  auto renewed = [&](int i) {
    return steady_clock::now() + holds[i].status().valid_for > granted[i] + ttl + milliseconds(100);
  };
  ASSERT_TRUE(WaitFor([&] {
    for (int i = 1; i < kHolds; i += 2) {
      if (!renewed(i)) return false;
    }
    return true;
  }, milliseconds(10000))) << "the TTL leases were not renewed";
  const size_t during = ThreadCount();
  RecordProperty("threads_before", static_cast<int>(before));
  RecordProperty("threads_with_holds", static_cast<int>(during));
  std::printf("threads: %zu before, %zu with %d holds\n", before, during, kHolds);
  EXPECT_LE(during, before + 4) << kHolds << " holds added " << during - before << " threads";
  for (int i = 0; i < kHolds; ++i) {
    EXPECT_EQ(holds[i].status().state, tc::LockState::kHeld) << i << ": " << holds[i].status().message;
    EXPECT_EQ(Contenders(absl::StrCat("threads-", i)), 1u) << i;
  }
  for (int i = 0; i < kHolds; ++i) {
    ASSERT_TRUE(holds[i].Release().ok()) << i;
    EXPECT_EQ(holds[i].status().state, tc::LockState::kReleased) << i;
    EXPECT_EQ(Contenders(absl::StrCat("threads-", i)), 0u) << i;
  }
  EXPECT_LE(ThreadCount(), before + 4);
}

// The library runs its streams on its own thread's completion queue, never
// on gRPC's callback API, whose reactors bring two "nexting_thread" threads
// into the process that hand the poller to each other on every event. The
// replicas in this process bring their own threads, so a client process of
// its own (tests/client_threads_child.cc) takes 20 holds through two
// Clients, half of them TTL leases renewed over KeepAlive, and lists its
// threads while they are held. One library thread polls for both Clients
// (more pollers would hand gRPC's poller to each other on every event).
TEST_F(ClientLibTest, ClientProcessHasNoCallbackThreads) {
  auto child = ChildProcess::Spawn({TestBinary("client_threads_child"), r1_->address(), "cq", "20"});
  ASSERT_TRUE(child);
  std::vector<std::string> threads;
  std::optional<std::string> line;
  const steady_clock::time_point deadline = steady_clock::now() + milliseconds(30000);
  while ((line = child->ReadLine(std::chrono::duration_cast<milliseconds>(
              std::max(deadline - steady_clock::now(), steady_clock::duration::zero()))))) {
    ASSERT_NE(line->rfind("ERROR", 0), 0u) << *line;
    if (line->rfind("THREAD ", 0) == 0) threads.push_back(line->substr(7));
    if (*line == "RELEASED") break;
  }
  ASSERT_TRUE(line) << "the child did not release its holds in time";
  EXPECT_EQ(child->Wait(milliseconds(10000)), std::optional<int>(0));
  RecordProperty("child_threads", static_cast<int>(threads.size()));
  std::printf("client process: %zu threads:", threads.size());
  for (const auto& t : threads) std::printf(" %s", t.c_str());
  std::printf("\n");
  EXPECT_EQ(std::count(threads.begin(), threads.end(), "nexting_thread"), 0)
      << "gRPC's callback threads run in a process that only uses the client library";
  EXPECT_EQ(std::count(threads.begin(), threads.end(), "turnstile-cq"), 1)
      << "not one library thread (which polls every Client's streams)";
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Contenders(absl::StrCat("cq-", i)), 0u) << i;
}

}  // namespace
}  // namespace turnstile::testing
