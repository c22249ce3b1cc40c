// Lock kinds (issue 12) through gRPC against real ZooKeeper: shared/exclusive
// (read/write) locks on one name: readers coexist, a writer holds alone, FIFO
// across kinds (a writer queued behind readers is never overtaken by readers
// that queued after it), herd-free waiting (a reader watches only the nearest
// writer ahead, a writer its predecessor), Describe's holders and kinds.
#include <gtest/gtest.h>

#include <csignal>
#include <functional>
#include <set>

#include "absl/strings/numbers.h"
#include "server/recipe/lock_name.h"
#include "tests/two_replicas.h"

namespace turnstile::testing {
namespace {

using v1::AcquireEvent;

v1::AcquireOpen Open(const std::string& name, bool shared, const std::string& owner) {
  v1::AcquireOpen o = OpenMsg(name, milliseconds(60000), owner);
  o.set_kind(shared ? v1::LOCK_KIND_SHARED : v1::LOCK_KIND_EXCLUSIVE);
  return o;
}

v1::AcquireOpen WithDelay(v1::AcquireOpen o, milliseconds delay) {
  o.mutable_lock_delay()->set_seconds(delay.count() / 1000);
  o.mutable_lock_delay()->set_nanos(static_cast<int32_t>(delay.count() % 1000) * 1000000);
  return o;
}

class KindsTest : public TwoReplicaTest {
 protected:
  KindsTest() : TwoReplicaTest("kinds") {}
  // Starts a contender and waits until its node exists (QUEUED or ACQUIRED
  // arrived), so the queue order is the order of these calls.
  std::unique_ptr<AcquireStream> Join(v1::LockService::Stub* stub, const std::string& name,
                                      bool shared, const std::string& owner) {
    auto s = std::make_unique<AcquireStream>(stub, Open(name, shared, owner));
    auto ev = s->Next();
    EXPECT_TRUE(ev) << owner << " got no first event";
    if (ev) {
      EXPECT_TRUE(ev->type() == AcquireEvent::QUEUED || ev->type() == AcquireEvent::ACQUIRED)
          << ev->ShortDebugString();
      if (ev->type() == AcquireEvent::ACQUIRED) tokens_[owner] = ev->acquired().fencing_token();
    }
    return s;
  }
  uint64_t Granted(AcquireStream& s, const std::string& owner) {
    auto ev = s.Await(AcquireEvent::ACQUIRED);
    EXPECT_TRUE(ev) << owner << " was not granted";
    if (!ev) return 0;
    return tokens_[owner] = ev->acquired().fencing_token();
  }
  void Release(AcquireStream& s) {
    s.SendRelease();
    EXPECT_TRUE(s.Await(AcquireEvent::RELEASED));
  }
  std::map<std::string, uint64_t> tokens_;
};

TEST_F(KindsTest, ReadersOverlapAWriterHoldsAloneAndFifoHoldsAcrossKinds) {
  auto r1 = Join(s1_.get(), "rw", true, "reader-1");
  auto r2 = Join(s2_.get(), "rw", true, "reader-2");
  ASSERT_TRUE(tokens_.count("reader-1") && tokens_.count("reader-2")) << "readers must overlap";
  auto w = Join(s1_.get(), "rw", false, "writer");
  auto r3 = Join(s2_.get(), "rw", true, "reader-3");  // after the writer: waits for it
  auto r4 = Join(s1_.get(), "rw", true, "reader-4");
  ASSERT_TRUE(ContendersBecome("rw", 5));

  // Describe: two shared holders, then the writer and the late readers.
  {
    v1::DescribeResponse resp;
    ASSERT_TRUE(Describe(s2_.get(), "rw", &resp).ok());
    ASSERT_EQ(resp.holders_size(), 2);
    ASSERT_EQ(resp.waiters_size(), 3);
    EXPECT_EQ(resp.holders(0).owner(), "reader-1");
    EXPECT_EQ(resp.holders(1).owner(), "reader-2");
    EXPECT_EQ(resp.holders(0).kind(), v1::LOCK_KIND_SHARED);
    EXPECT_EQ(resp.waiters(0).owner(), "writer");
    EXPECT_EQ(resp.waiters(0).kind(), v1::LOCK_KIND_EXCLUSIVE);
    EXPECT_EQ(resp.waiters(1).kind(), v1::LOCK_KIND_SHARED);
  }

  // One reader leaves: the writer still waits for the other.
  Release(*r1);
  ASSERT_TRUE(ContendersBecome("rw", 4));
  EXPECT_TRUE(StillWaiting(*w));
  EXPECT_TRUE(StillWaiting(*r3));
  // The last reader ahead leaves: the writer holds, alone.
  Release(*r2);
  const uint64_t wt = Granted(*w, "writer");
  EXPECT_GT(wt, tokens_["reader-1"]);
  EXPECT_GT(wt, tokens_["reader-2"]);
  EXPECT_TRUE(StillWaiting(*r3));
  EXPECT_TRUE(StillWaiting(*r4));
  // The writer leaves: both late readers hold together.
  Release(*w);
  EXPECT_GT(Granted(*r3, "reader-3"), wt);
  EXPECT_GT(Granted(*r4, "reader-4"), wt);
  Release(*r3);
  Release(*r4);
  EXPECT_TRUE(ContendersBecome("rw", 0));
}

// Herd-freedom across kinds. Releasing a writer in front of 50 queued
// readers (on two replicas) wakes exactly those readers, and all of them are
// granted with no listing; releasing a reader that is not a waiting writer's
// predecessor notifies nobody; a writer behind readers watches only its
// predecessor, and a reader only the nearest writer ahead.
TEST_F(KindsTest, ReadersWatchTheNearestWriterAndAWriterItsPredecessor) {
  constexpr int kReaders = 50;
  const std::string lock = LockPath("herd-rw");
  auto writer = Join(s1_.get(), "herd-rw", false, "writer");
  ASSERT_TRUE(tokens_.count("writer"));
  std::vector<std::unique_ptr<AcquireStream>> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.push_back(Join(i % 2 ? s2_.get() : s1_.get(), "herd-rw", true, "reader-" + std::to_string(i)));
  }
  auto late_writer = Join(s2_.get(), "herd-rw", false, "late-writer");
  std::vector<std::string> queue = zk_->Contenders(lock);
  ASSERT_EQ(queue.size(), static_cast<size_t>(kReaders + 2));

  // Every reader watches the writer's node; the late writer its predecessor
  // (the last reader). ZooKeeper lists data watches per path and session.
  std::map<std::string, std::vector<std::string>> by_path;
  ASSERT_TRUE(WaitFor([&] {
    auto w = SharedZkServer().WatchesByPath();
    if (!w.ok()) return false;
    by_path = *w;
    return by_path.count(lock + "/" + queue[0]) && by_path[lock + "/" + queue[0]].size() == 2 &&
           by_path.count(lock + "/" + queue[kReaders]);
  }, milliseconds(10000)));
  for (int i = 1; i < kReaders; ++i) {
    EXPECT_EQ(by_path.count(lock + "/" + queue[i]), 0u) << "reader " << i << "'s node is watched";
  }

  uint64_t lists_before = r1_->zk().call_count(ZkOp::kGetChildren) + r2_->zk().call_count(ZkOp::kGetChildren);
  int64_t deleted_before = MntrValue("zk_sum_node_deleted_watch_count");
  Release(*writer);
  std::set<uint64_t> tokens;
  for (int i = 0; i < kReaders; ++i) tokens.insert(Granted(*readers[i], "reader-" + std::to_string(i)));
  EXPECT_EQ(tokens.size(), static_cast<size_t>(kReaders));
  EXPECT_GT(*tokens.begin(), tokens_["writer"]);
  EXPECT_EQ(r1_->zk().call_count(ZkOp::kGetChildren) + r2_->zk().call_count(ZkOp::kGetChildren),
            lists_before);
  // One notification per session that watched the writer's node.
  EXPECT_EQ(MntrValue("zk_sum_node_deleted_watch_count") - deleted_before, 2);
  EXPECT_TRUE(StillWaiting(*late_writer));

  // A reader that is not the late writer's predecessor leaves: the only
  // watch that fires is its own holder's watch on its own node (on its own
  // replica's session); the late writer's replica hears nothing, and the
  // late writer still waits.
  // (A hold watches its own node from 10 ms after its grant on: wait for
  // that watch, which the departure below must fire.)
  ASSERT_TRUE(WaitFor([&] {
    auto w = SharedZkServer().WatchesByPath();
    return w.ok() && w->count(lock + "/" + queue[1]) > 0;
  }, milliseconds(10000))) << "reader 0 never watched its own node";
  deleted_before = MntrValue("zk_sum_node_deleted_watch_count");
  const uint64_t r2_events = r2_->zk().watch_events();
  Release(*readers[0]);  // on r1
  ASSERT_TRUE(ContendersBecome("herd-rw", kReaders));
  EXPECT_EQ(MntrValue("zk_sum_node_deleted_watch_count") - deleted_before, 1);
  EXPECT_EQ(r2_->zk().watch_events(), r2_events);
  EXPECT_TRUE(StillWaiting(*late_writer));
  // The rest leave (the predecessor first: its departure notifies the late
  // writer, which then watches the next reader ahead); it holds after the
  // last one.
  for (int i = kReaders - 1; i >= 1; --i) {
    Release(*readers[i]);
    if (i > 1) EXPECT_TRUE(StillWaiting(*late_writer)) << "granted with reader " << i - 1 << " still holding";
  }
  EXPECT_GT(Granted(*late_writer, "late-writer"), *tokens.rbegin());
  Release(*late_writer);
  EXPECT_TRUE(ContendersBecome("herd-rw", 0));
}

grpc::Status Revoke(v1::LockService::Stub* stub, const std::string& lease, const std::string& requester,
                    const std::string& reason) {
  grpc::ClientContext ctx;
  v1::RevokeRequest req;
  req.set_lease_id(lease);
  req.set_requester(requester);
  req.set_reason(reason);
  v1::RevokeResponse resp;
  return stub->Revoke(&ctx, req, &resp);
}

grpc::Status KeepAliveOnce(v1::LockService::Stub* stub, const std::string& lease) {
  grpc::ClientContext ctx;
  auto rw = stub->KeepAlive(&ctx);
  v1::KeepAliveRequest req;
  req.add_lease_ids(lease);
  v1::KeepAliveResponse resp;
  const bool ok = rw->Write(req) && rw->Read(&resp);
  rw->WritesDone();
  grpc::Status st = rw->Finish();
  if (st.ok() && (!ok || resp.leases_size() != 1 || resp.leases(0).code() != 0)) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "lease not renewed");
  }
  return st;
}

// Must-show 4: Revoke through the other replica reaches the holder as
// REVOKE_REQUESTED (who asked, why); a holder that ignores it keeps the lock
// (the waiter waits; Describe shows the pending request); a gone lease is
// NOT_FOUND; bad input is refused with its limit.
TEST_F(KindsTest, RevokeReachesTheHolderWhichDecides) {
  AcquireStream holder(s1_.get(), Open("revoke", false, "holder"));
  auto acquired = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acquired);
  const std::string lease = acquired->acquired().lease_id();
  auto waiter = Join(s2_.get(), "revoke", false, "waiter");

  ASSERT_TRUE(Revoke(s2_.get(), lease, "ops-bob", "deploy window").ok());
  auto asked = holder.Await(AcquireEvent::REVOKE_REQUESTED);
  ASSERT_TRUE(asked);
  // With mutual TLS the holder is told who really asked, beside the label.
  auto shown = [](const std::string& label) {
    return MtlsMode() ? absl::StrCat(kMtlsSuiteIdentity, " (says \"", label, "\")") : label;
  };
  EXPECT_EQ(asked->revoke_requested().requester(), shown("ops-bob"));
  EXPECT_EQ(asked->revoke_requested().reason(), "deploy window");
  EXPECT_EQ(r1_->engine().stats().revokes_delivered, 1u);
  EXPECT_EQ(r2_->engine().stats().revokes_requested, 1u);
  {
    v1::DescribeResponse resp;
    ASSERT_TRUE(Describe(s1_.get(), "revoke", &resp).ok());
    ASSERT_EQ(resp.holders_size(), 1);
    EXPECT_EQ(resp.holders(0).revoke_requests(), 1);
    EXPECT_EQ(resp.holders(0).revoke_requester(), shown("ops-bob"));
    EXPECT_EQ(resp.holders(0).revoke_reason(), "deploy window");
  }
  // Ignored: still held, the waiter still waits; a second request arrives too.
  ASSERT_TRUE(Revoke(s1_.get(), lease, "ops-carol", "again").ok());
  auto again = holder.Await(AcquireEvent::REVOKE_REQUESTED);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->revoke_requested().requester(), shown("ops-carol"));
  EXPECT_TRUE(StillWaiting(*waiter));
  EXPECT_EQ(zk_->Contenders(LockPath("revoke")).size(), 2u);
  // The holder decides to let go: the waiter gets the lock.
  Release(holder);
  Granted(*waiter, "waiter");
  EXPECT_EQ(Revoke(s2_.get(), lease, "ops-bob", "late").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Revoke(s2_.get(), "not a lease", "x", "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto long_reason = Revoke(s2_.get(), lease, "x", std::string(257, 'r'));
  EXPECT_EQ(long_reason.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(long_reason.error_message().find("256"), std::string::npos) << long_reason.error_message();
  Release(*waiter);
}

// A waiter that asks (revoke_holders) makes the holders ahead hear
// REVOKE_REQUESTED with its owner and reason: the exclusive holder, or all
// shared holders at the front.
TEST_F(KindsTest, AWaiterCanAskTheHoldersToLetGo) {
  auto r1 = Join(s1_.get(), "ask", true, "reader-1");
  auto r2 = Join(s2_.get(), "ask", true, "reader-2");
  v1::AcquireOpen open = Open("ask", false, "impatient-writer");
  open.set_revoke_holders(true);
  open.set_revoke_reason("schema migration");
  AcquireStream writer(s1_.get(), open);
  for (AcquireStream* reader : {r1.get(), r2.get()}) {
    auto asked = reader->Await(AcquireEvent::REVOKE_REQUESTED);
    ASSERT_TRUE(asked);
    // With mutual TLS the verified identity of the waiter that asked, beside its owner.
    EXPECT_EQ(asked->revoke_requested().requester(),
              MtlsMode() ? absl::StrCat(kMtlsSuiteIdentity, " (says \"impatient-writer\")")
                         : "impatient-writer");
    EXPECT_EQ(asked->revoke_requested().reason(), "schema migration");
  }
  Release(*r1);
  Release(*r2);
  Granted(writer, "impatient-writer");
  Release(writer);
}

// A revocation request rewrites the holder's node, as a remote KeepAlive
// does, but it is not a renewal: the owner follows the counters in the
// node's data. Renewals interleaved with requests still renew; requests
// alone let a TTL lease expire.
TEST_F(KindsTest, RevocationRequestsAreNotRenewals) {
  v1::AcquireOpen open = OpenMsg("ttl-revoke", milliseconds(60000), "leased", milliseconds(1000));
  AcquireStream holder(s1_.get(), open);
  auto acquired = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acquired);
  const std::string lease = acquired->acquired().lease_id();
  auto until = std::chrono::steady_clock::now() + milliseconds(2500);
  int requests = 0;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(KeepAliveOnce(s2_.get(), lease).ok());
    ASSERT_TRUE(Revoke(s2_.get(), lease, "ops", "r" + std::to_string(++requests)).ok());
    auto asked = holder.Await(AcquireEvent::REVOKE_REQUESTED, milliseconds(2000));
    ASSERT_TRUE(asked) << "request " << requests;
  }
  // Requests only, 200 ms apart: the lease expires within its ttl.
  const auto last_renewal = std::chrono::steady_clock::now();
  std::optional<AcquireEvent> lost;
  while (!lost && std::chrono::steady_clock::now() - last_renewal < milliseconds(4000)) {
    if (!Revoke(s2_.get(), lease, "ops", "no renewal").ok()) break;
    auto ev = holder.Next(milliseconds(200));
    if (ev && ev->type() == AcquireEvent::LOST) lost = ev;
  }
  if (!lost) lost = holder.Await(AcquireEvent::LOST, milliseconds(3000));
  ASSERT_TRUE(lost) << "revocation requests kept the lease alive";
  EXPECT_EQ(lost->lost().reason(), v1::Lost::LEASE_EXPIRED);
  EXPECT_LT(std::chrono::steady_clock::now() - last_renewal, milliseconds(2500));
}

// Must-show 5 (part): read/write locks through a session expiry. The
// expired replica's reader is LOST(SESSION_EXPIRED) and its waiting writer
// queues again at the end (SPEC §4), so the reader behind the old writer
// position is granted beside the surviving reader; the writer then gets the
// lock after both; no node is left.
TEST_F(KindsTest, ReadWriteLocksThroughASessionExpiry) {
  auto r1 = Join(s1_.get(), "rw-expiry", true, "reader-1");
  auto r2 = Join(s2_.get(), "rw-expiry", true, "reader-2");
  auto w = Join(s1_.get(), "rw-expiry", false, "writer");
  auto r3 = Join(s2_.get(), "rw-expiry", true, "reader-3");
  ASSERT_TRUE(ContendersBecome("rw-expiry", 4));
  ASSERT_TRUE(ExpireReplicaSession(connect_, *r1_));
  auto lost = r1->AwaitAfterSuspension(AcquireEvent::LOST);
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->lost().reason(), v1::Lost::SESSION_EXPIRED);
  Granted(*r3, "reader-3");  // the writer ahead of it went with the session
  ASSERT_TRUE(ContendersBecome("rw-expiry", 3));  // the writer queued again
  EXPECT_FALSE(w->ended());
  Release(*r2);
  Release(*r3);
  EXPECT_GT(Granted(*w, "writer"), tokens_["reader-3"]);
  Release(*w);
  EXPECT_TRUE(ContendersBecome("rw-expiry", 0));
}

// Must-show 5 (part): read/write locks and a lock-delay hold through a
// ZooKeeper restart within the session timeout: holders SUSPENDED then
// RESUMED (none lost), the waiting writer only QUEUED; afterwards a
// revocation request reaches a holder, a clean release of the lock-delay
// hold hands over at once, and the queue drains with no node left.
TEST_F(KindsTest, KindsThroughAZooKeeperRestart) {
  auto server = ZkServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ReplicaConfig cfg = TestConfig((*server)->ConnectString(), root_);
  cfg.zk_session_timeout = milliseconds(30000);
  auto a = StartReplica(cfg);
  auto b = StartReplica(cfg);
  auto sa = NewStub(a->address());
  auto sb = NewStub(b->address());
  zk_ = std::make_unique<SyncZk>((*server)->ConnectString());
  auto r1 = Join(sa.get(), "restart-rw", true, "reader-1");
  auto r2 = Join(sb.get(), "restart-rw", true, "reader-2");
  auto w = Join(sa.get(), "restart-rw", false, "writer");
  AcquireStream delayed(sb.get(), WithDelay(Open("restart-delay", false, "delayed"), milliseconds(20000)));
  auto acquired = delayed.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acquired);
  ASSERT_TRUE(ContendersBecome("restart-rw", 3));
  zk_.reset();

  ASSERT_TRUE((*server)->Restart().ok());
  for (AcquireStream* h : {r1.get(), r2.get(), &delayed}) {
    ASSERT_TRUE(h->Await(AcquireEvent::SUSPENDED, milliseconds(30000)));
    ASSERT_TRUE(h->Await(AcquireEvent::RESUMED, milliseconds(30000)));
  }
  EXPECT_TRUE(StillWaiting(*w));
  // After the restart: a revocation request reaches the holder; the
  // clean release of the lock-delay hold hands over at once.
  ASSERT_TRUE(Revoke(sa.get(), acquired->acquired().lease_id(), "ops", "after restart").ok());
  ASSERT_TRUE(delayed.Await(AcquireEvent::REVOKE_REQUESTED));
  auto next = Join(sa.get(), "restart-delay", false, "next");
  const auto t0 = std::chrono::steady_clock::now();
  Release(delayed);
  Granted(*next, "next");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000));
  Release(*next);
  Release(*r1);
  Release(*r2);
  Granted(*w, "writer");
  Release(*w);
  zk_ = std::make_unique<SyncZk>((*server)->ConnectString());
  EXPECT_TRUE(ContendersBecome("restart-rw", 0));
  EXPECT_TRUE(ContendersBecome("restart-delay", 0));
}


// Must-show 3: after the holder's replica is killed, the next holder (on
// another replica) is granted no sooner than the holder's lock-delay after
// the loss; meanwhile Describe shows the lock in delay, a try-once through
// a third replica is refused, and the gauge counts the lock.
TEST_F(KindsTest, LockDelayAfterTheHoldersReplicaIsKilled) {
  auto proc = SpawnReplicaProcess({"--zk", connect_, "--zk-root", root_, "--zk-session-timeout", "2s"});
  ASSERT_TRUE(proc);
  auto pstub = NewStub(proc->address);
  AcquireStream holder(pstub.get(), WithDelay(Open("delayed", false, "doomed"), milliseconds(3000)));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
  auto waiter = Join(s2_.get(), "delayed", false, "next");
  ASSERT_TRUE(ContendersBecome("delayed", 2));

  proc->process->Signal(SIGKILL);
  ASSERT_TRUE(proc->process->Wait(milliseconds(10000)));
  ASSERT_TRUE(ContendersBecome("delayed", 1));  // the session expired: its node is gone
  const auto gone = std::chrono::steady_clock::now();
  // In delay: Describe says until when; a try-once elsewhere is refused.
  ASSERT_TRUE(WaitFor([&] {
    v1::DescribeResponse resp;
    return Describe(s1_.get(), "delayed", &resp).ok() && resp.has_delayed_until();
  }, milliseconds(2000)));
  EXPECT_EQ(r2_->engine().stats().locks_in_delay, 1u);
  {
    AcquireStream once(s1_.get(), OpenMsg("delayed", milliseconds(0), "try-once"));
    auto st = once.AwaitEnd();
    ASSERT_TRUE(st);
    EXPECT_EQ(st->error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st->error_message();
  }
  ASSERT_TRUE(waiter->Await(AcquireEvent::ACQUIRED, milliseconds(10000)));
  const auto waited = std::chrono::steady_clock::now() - gone;
  EXPECT_GE(waited, milliseconds(2900));  // 3 s from the loss (seen here a little late)
  EXPECT_LE(waited, milliseconds(5000));
  Release(*waiter);
}

// Must-show 3: a TTL lease that expires ends the hold involuntarily: the
// next holder on the same replica waits the delay; a clean release hands
// over at once, to a waiter on the same and on another replica.
TEST_F(KindsTest, LockDelayAfterLeaseExpiryButNotAfterACleanRelease) {
  AcquireStream leased(s1_.get(), WithDelay(OpenMsg("ttl-delay", milliseconds(60000), "leased",
                                                    milliseconds(1000)),
                                            milliseconds(2000)));
  ASSERT_TRUE(leased.Await(AcquireEvent::ACQUIRED));
  auto local = Join(s1_.get(), "ttl-delay", false, "local-next");
  auto lost = leased.Await(AcquireEvent::LOST, milliseconds(5000));
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->lost().reason(), v1::Lost::LEASE_EXPIRED);
  const auto at = std::chrono::steady_clock::now();
  ASSERT_TRUE(local->Await(AcquireEvent::ACQUIRED, milliseconds(10000)));
  EXPECT_GE(std::chrono::steady_clock::now() - at, milliseconds(1900));

  // Clean releases of holds with a long lock-delay: no waiting.
  AcquireStream clean(s1_.get(), WithDelay(Open("clean-delay", false, "clean"), milliseconds(30000)));
  ASSERT_TRUE(clean.Await(AcquireEvent::ACQUIRED));
  auto remote = std::make_unique<AcquireStream>(
      s2_.get(), WithDelay(Open("clean-delay", false, "remote"), milliseconds(30000)));
  ASSERT_TRUE(remote->Await(AcquireEvent::QUEUED));
  auto same = Join(s2_.get(), "clean-delay", false, "same-replica");
  auto t0 = std::chrono::steady_clock::now();
  Release(clean);
  ASSERT_TRUE(remote->Await(AcquireEvent::ACQUIRED, milliseconds(10000)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000));
  t0 = std::chrono::steady_clock::now();
  Release(*remote);
  ASSERT_TRUE(same->Await(AcquireEvent::ACQUIRED, milliseconds(10000)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000));
  Release(*same);
  Release(*local);
}

// Issue 19 (1): a hold whose client goes away without releasing -- its
// stream cancelled, its process killed (a gRPC client and the CLI) -- ended
// involuntarily: the next holder, here on another replica, waits the
// holder's lock-delay, and Describe shows the delay meanwhile. A half-close
// is a release and hands over at once (the contract's other clean end).
TEST_F(KindsTest, LockDelayWhenTheHoldersClientGoesAway) {
  constexpr milliseconds kDelay(3000);
  // Holds `name` through `start`, queues a waiter behind it on the other
  // replica, ends the hold through `end`; how long the waiter then waited,
  // and whether Describe showed the delay.
  auto handover = [&](const std::string& name, const std::function<void()>& start,
                      const std::function<void()>& end, bool* described) {
    start();
    auto waiter = Join(s2_.get(), name, false, "next-" + name);
    EXPECT_TRUE(ContendersBecome(name, 2)) << name;
    end();
    EXPECT_TRUE(ContendersBecome(name, 1)) << name;
    const auto gone = std::chrono::steady_clock::now();
    *described = false;
    std::optional<AcquireEvent> got;
    while (!got && std::chrono::steady_clock::now() - gone < milliseconds(10000)) {
      v1::DescribeResponse resp;
      if (Describe(s1_.get(), name, &resp).ok() && resp.has_delayed_until()) *described = true;
      got = waiter->Await(AcquireEvent::ACQUIRED, milliseconds(50));
    }
    EXPECT_TRUE(got) << name << ": the waiter was not granted";
    const auto waited = std::chrono::steady_clock::now() - gone;
    Release(*waiter);
    return std::chrono::duration_cast<milliseconds>(waited);
  };

  // 1. The gRPC stream cancelled (the client's context).
  std::unique_ptr<AcquireStream> holder;
  bool described = false;
  auto waited = handover(
      "gone-cancel",
      [&] {
        holder = std::make_unique<AcquireStream>(
            s1_.get(), WithDelay(Open("gone-cancel", false, "cancelled"), kDelay));
        ASSERT_TRUE(holder->Await(AcquireEvent::ACQUIRED));
      },
      [&] { holder->Cancel(); }, &described);
  EXPECT_GE(waited.count(), 2900) << "a cancelled stream handed over at once";
  EXPECT_LE(waited.count(), 8000);
  EXPECT_TRUE(described) << "Describe never showed delayed_until";

  // 2. A gRPC client process killed (kill -9).
  std::unique_ptr<ChildProcess> child;
  waited = handover(
      "gone-kill",
      [&] {
        child = ChildProcess::Spawn({TestBinary("acquire_child"), r1_->address(), "gone-kill",
                                     "10000", std::to_string(kDelay.count())});
        ASSERT_TRUE(child);
        auto line = child->AwaitLine("ACQUIRED", milliseconds(20000));
        ASSERT_TRUE(line);
      },
      [&] {
        child->Signal(SIGKILL);
        ASSERT_TRUE(child->Wait(milliseconds(10000)));
      },
      &described);
  EXPECT_GE(waited.count(), 2900) << "a killed client handed over at once";
  EXPECT_LE(waited.count(), 8000);
  EXPECT_TRUE(described);

  // 3. The CLI holding with --lock-delay, killed (kill -9).
  waited = handover(
      "gone-cli",
      [&] {
        child = ChildProcess::Spawn({CLI_PATH, "--server", r1_->address(), "acquire", "gone-cli",
                                     "--lock-delay", "3s"});
        ASSERT_TRUE(child);
        ASSERT_TRUE(child->AwaitLine("ACQUIRED", milliseconds(20000)));
      },
      [&] {
        child->Signal(SIGKILL);
        ASSERT_TRUE(child->Wait(milliseconds(10000)));
      },
      &described);
  EXPECT_GE(waited.count(), 2900) << "a killed CLI handed over at once";
  EXPECT_LE(waited.count(), 8000);
  EXPECT_TRUE(described);

  // 4. A half-close is a release: at once.
  waited = handover(
      "gone-halfclose",
      [&] {
        holder = std::make_unique<AcquireStream>(
            s1_.get(), WithDelay(Open("gone-halfclose", false, "half-closed"), milliseconds(30000)));
        ASSERT_TRUE(holder->Await(AcquireEvent::ACQUIRED));
      },
      [&] {
        holder->CloseWrites();
        // The server checks the stream is alive with RELEASING first.
        ASSERT_TRUE(holder->Await(AcquireEvent::RELEASING));
        ASSERT_TRUE(holder->Await(AcquireEvent::RELEASED));
      },
      &described);
  EXPECT_LT(waited.count(), 2000) << "a half-close waited the lock-delay";
  EXPECT_FALSE(described);
}

}  // namespace
}  // namespace turnstile::testing
