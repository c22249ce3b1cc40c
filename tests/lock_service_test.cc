// Integration tests through gRPC against two in-process replicas on a real
// ZooKeeper (the shared fixture server).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>

#include <dirent.h>

#include <fstream>

#include <grpcpp/generic/generic_stub.h>

#include "grpc/health/v1/health.grpc.pb.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/recipe/lock_name.h"
#include "server/rpc/lock_service.h"
#include "server/replica.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

using v1::AcquireEvent;

class LockServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    zk_connect_ = SharedZkServer().ConnectString();
    root_ = UniqueRoot("svc");
    r1_ = StartReplica(TestConfig(zk_connect_, root_));
    r2_ = StartReplica(TestConfig(zk_connect_, root_));
    ASSERT_TRUE(r1_ && r2_);
    s1_ = NewStub(r1_->address());
    s2_ = NewStub(r2_->address());
    zk_ = std::make_unique<SyncZk>(zk_connect_);
  }

  std::string LockPath(const std::string& name) {
    return root_ + "/" + EncodeLockName(name);
  }
  // Waits until the lock has exactly `n` contender nodes.
  bool ContendersBecome(const std::string& name, size_t n,
                        milliseconds timeout = milliseconds(15000)) {
    return WaitFor([&] { return zk_->Contenders(LockPath(name)).size() == n; }, timeout);
  }
  std::unique_ptr<AcquireStream> Hold(v1::LockService::Stub* stub, const std::string& name,
                                      uint64_t* token = nullptr, std::string* lease = nullptr,
                                      const std::string& owner = "holder",
                                      milliseconds ttl = milliseconds(0)) {
    auto s = std::make_unique<AcquireStream>(stub, OpenMsg(name, milliseconds(30000), owner, ttl));
    auto ev = s->Await(AcquireEvent::ACQUIRED);
    EXPECT_TRUE(ev.has_value()) << "not acquired: " << name;
    if (ev && token) *token = ev->acquired().fencing_token();
    if (ev && lease) *lease = ev->acquired().lease_id();
    return s;
  }

  std::string zk_connect_, root_;
  std::unique_ptr<Replica> r1_, r2_;
  std::unique_ptr<v1::LockService::Stub> s1_, s2_;
  std::unique_ptr<SyncZk> zk_;
};

// Must-show 1: 16 clients over 2 replicas, 50 acquisitions each.
TEST_F(LockServiceTest, MutualExclusionAndIncreasingFencingTokens) {
  constexpr int kClients = 16, kRounds = 50;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::mutex mu;
  std::vector<uint64_t> grant_order_tokens;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      v1::LockService::Stub* stub = (c % 2 == 0) ? s1_.get() : s2_.get();
      for (int i = 0; i < kRounds; ++i) {
        AcquireStream s(stub, OpenMsg("mutex", milliseconds(60000), absl::StrCat("c", c)));
        auto ev = s.Await(AcquireEvent::ACQUIRED, milliseconds(60000));
        if (!ev) {
          ++failures;
          return;
        }
        if (inside.fetch_add(1) != 0) ++overlaps;
        {
          std::lock_guard<std::mutex> l(mu);
          grant_order_tokens.push_back(ev->acquired().fencing_token());
        }
        std::this_thread::yield();  // widen the window an overlap would need
        inside.fetch_sub(1);
        s.SendRelease();
        auto rel = s.Await(AcquireEvent::RELEASED, milliseconds(30000));
        if (!rel) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);
  ASSERT_EQ(grant_order_tokens.size(), static_cast<size_t>(kClients * kRounds));
  for (size_t i = 1; i < grant_order_tokens.size(); ++i) {
    ASSERT_LT(grant_order_tokens[i - 1], grant_order_tokens[i]) << "at grant " << i;
  }
  EXPECT_TRUE(ContendersBecome("mutex", 0));
}

// Must-show 2: grants follow QUEUED order; positions shrink as it drains.
TEST_F(LockServiceTest, FifoOrderAndShrinkingPositions) {
  auto holder = Hold(s1_.get(), "fifo");
  constexpr int kWaiters = 5;
  std::vector<std::unique_ptr<AcquireStream>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::make_unique<AcquireStream>(
        s1_.get(), OpenMsg("fifo", milliseconds(30000), absl::StrCat("w", i))));
    auto q = waiters.back()->Next();
    ASSERT_TRUE(q && q->type() == AcquireEvent::QUEUED);
    EXPECT_EQ(q->queued().position(), i + 1);
    EXPECT_EQ(q->queued().ahead(), i + 1);
  }
  holder->SendRelease();
  ASSERT_TRUE(holder->Await(AcquireEvent::RELEASED));
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_TRUE(waiters[i]->Await(AcquireEvent::ACQUIRED)) << "waiter " << i;
    // Nobody behind it may have been granted first.
    for (int j = i + 1; j < kWaiters; ++j) {
      auto peek = waiters[j]->Next(milliseconds(0));
      if (peek) {
        EXPECT_EQ(peek->type(), AcquireEvent::QUEUED) << "waiter " << j << " jumped ahead";
      }
    }
    waiters[i]->SendRelease();
    ASSERT_TRUE(waiters[i]->Await(AcquireEvent::RELEASED));
  }
  for (int i = 0; i < kWaiters; ++i) {
    auto seen = waiters[i]->queued_seen();
    ASSERT_FALSE(seen.empty());
    for (size_t k = 1; k < seen.size(); ++k) {
      EXPECT_LT(seen[k].queued().position(), seen[k - 1].queued().position());
    }
    EXPECT_EQ(seen.back().queued().position(), 1) << "waiter " << i;
    if (i > 0) EXPECT_GT(seen.size(), 1u) << "waiter " << i << " never saw its position shrink";
  }
}

// Must-show 4a: try-once and wait timeout on a held lock.
TEST_F(LockServiceTest, TryOnceAndWaitTimeoutFailWithDocumentedCodes) {
  auto holder = Hold(s1_.get(), "busy");
  AcquireStream once(s2_.get(), OpenMsg("busy", milliseconds(0)));
  auto st = once.AwaitEnd();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st->error_message();
  EXPECT_TRUE(ContendersBecome("busy", 1));

  auto start = std::chrono::steady_clock::now();
  AcquireStream timed(s2_.get(), OpenMsg("busy", milliseconds(400)));
  st = timed.AwaitEnd();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st->error_message();
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(400));
  EXPECT_TRUE(ContendersBecome("busy", 1));

  // On a free lock, try-once acquires.
  holder->SendRelease();
  ASSERT_TRUE(holder->Await(AcquireEvent::RELEASED));
  AcquireStream free_once(s2_.get(), OpenMsg("busy", milliseconds(0)));
  EXPECT_TRUE(free_once.Await(AcquireEvent::ACQUIRED));
}

// Must-show 4b: a cancelled wait leaves no node; the next waiter is served.
TEST_F(LockServiceTest, CancelledWaitLeavesNoNode) {
  auto holder = Hold(s1_.get(), "cancel");
  auto w1 = std::make_unique<AcquireStream>(s1_.get(), OpenMsg("cancel", milliseconds(30000)));
  ASSERT_TRUE(w1->Next());  // QUEUED
  auto w2 = std::make_unique<AcquireStream>(s2_.get(), OpenMsg("cancel", milliseconds(30000)));
  ASSERT_TRUE(w2->Next());
  ASSERT_TRUE(ContendersBecome("cancel", 3));
  w1->Cancel();
  ASSERT_TRUE(ContendersBecome("cancel", 2));
  holder->SendRelease();
  EXPECT_TRUE(w2->Await(AcquireEvent::ACQUIRED, milliseconds(5000)));
  EXPECT_TRUE(ContendersBecome("cancel", 1));
}

// A waiter that sends `release` stops waiting and its stream ends OK, as
// the proto's AcquireRequest.release promises (it ended CANCELLED), with no
// ACQUIRED or RELEASED; its node is gone and the holder is undisturbed.
TEST_F(LockServiceTest, ReleaseWhileWaitingEndsOk) {
  auto holder = Hold(s1_.get(), "release-waiting");
  AcquireStream waiter(s2_.get(), OpenMsg("release-waiting", milliseconds(30000)));
  ASSERT_TRUE(waiter.Await(AcquireEvent::QUEUED));
  ASSERT_TRUE(ContendersBecome("release-waiting", 2));
  waiter.SendRelease();
  auto st = waiter.AwaitEnd();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->error_code(), grpc::StatusCode::OK) << st->error_message();
  while (auto e = waiter.Next(milliseconds(0))) {
    EXPECT_EQ(e->type(), AcquireEvent::QUEUED) << e->DebugString();
  }
  EXPECT_TRUE(ContendersBecome("release-waiting", 1));
  EXPECT_FALSE(holder->Next(milliseconds(200)));  // nothing for the holder
}

// Must-show 4c: clients that die mid-wait or while holding leave no node.
TEST_F(LockServiceTest, DeadClientsLeaveNoNodes) {
  auto child_holder = ChildProcess::Spawn({TestBinary("acquire_child"), r1_->address(), "dead", "30000"});
  ASSERT_TRUE(child_holder);
  ASSERT_TRUE(child_holder->AwaitLine("ACQUIRED", milliseconds(20000)));
  auto child_waiter = ChildProcess::Spawn({TestBinary("acquire_child"), r2_->address(), "dead", "30000"});
  ASSERT_TRUE(child_waiter->AwaitLine("QUEUED", milliseconds(20000)));
  auto waiter = std::make_unique<AcquireStream>(s1_.get(), OpenMsg("dead", milliseconds(30000)));
  ASSERT_TRUE(waiter->Next());
  ASSERT_TRUE(ContendersBecome("dead", 3));

  child_waiter->Signal(SIGKILL);  // dies mid-wait
  ASSERT_TRUE(child_waiter->Wait(milliseconds(5000)));
  EXPECT_TRUE(ContendersBecome("dead", 2));
  auto start = std::chrono::steady_clock::now();
  child_holder->Signal(SIGKILL);  // dies while holding
  ASSERT_TRUE(child_holder->Wait(milliseconds(5000)));
  ASSERT_TRUE(waiter->Await(AcquireEvent::ACQUIRED, milliseconds(5000)));
  // Promptly: long before the 6 s session timeout would have freed it.
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
  EXPECT_TRUE(ContendersBecome("dead", 1));
}

// Must-show 5: Release through the other replica; stale/unknown ids.
TEST_F(LockServiceTest, ReleaseThroughOtherReplicaAndStaleLeaseIds) {
  std::string lease;
  auto holder = Hold(s1_.get(), "rel", nullptr, &lease);
  auto waiter = std::make_unique<AcquireStream>(s1_.get(), OpenMsg("rel", milliseconds(30000)));
  ASSERT_TRUE(waiter->Next());
  {
    grpc::ClientContext ctx;
    v1::ReleaseRequest req;
    req.set_lease_id(lease);
    v1::ReleaseResponse resp;
    grpc::Status st = s2_->Release(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  auto lost = holder->Await(AcquireEvent::LOST);
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->lost().reason(), v1::Lost::DELETED);
  std::string next_lease;
  auto acq = waiter->Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq);
  next_lease = acq->acquired().lease_id();

  auto release = [&](v1::LockService::Stub* stub, const std::string& id) {
    grpc::ClientContext ctx;
    v1::ReleaseRequest req;
    req.set_lease_id(id);
    v1::ReleaseResponse resp;
    return stub->Release(&ctx, req, &resp);
  };
  // The stale id again, through either replica: NOT_FOUND.
  EXPECT_EQ(release(s2_.get(), lease).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(release(s1_.get(), lease).error_code(), grpc::StatusCode::NOT_FOUND);
  // A well-formed id that never existed: NOT_FOUND.
  std::string unknown = FormatLeaseId(EncodeLockName("rel"), "x-00000000deadbeef-0000000001");
  EXPECT_EQ(release(s2_.get(), unknown).error_code(), grpc::StatusCode::NOT_FOUND);
  // The current holder was not disturbed.
  EXPECT_FALSE(waiter->Next(milliseconds(300)).has_value());
  auto nodes = zk_->Contenders(LockPath("rel"));
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(FormatLeaseId(EncodeLockName("rel"), nodes[0]), next_lease);
  // Release through the holder's own replica: LOST(DELETED) as well.
  EXPECT_TRUE(release(s1_.get(), next_lease).ok());
  auto lost_local = waiter->Await(AcquireEvent::LOST);
  ASSERT_TRUE(lost_local);
  EXPECT_EQ(lost_local->lost().reason(), v1::Lost::DELETED);
  EXPECT_TRUE(ContendersBecome("rel", 0));
}

grpc::Status KeepAliveOnce(v1::LockService::Stub* stub, const std::vector<std::string>& ids,
                           v1::KeepAliveResponse* resp) {
  grpc::ClientContext ctx;
  auto rw = stub->KeepAlive(&ctx);
  v1::KeepAliveRequest req;
  for (const auto& id : ids) req.add_lease_ids(id);
  rw->Write(req);
  bool got = rw->Read(resp);
  rw->WritesDone();
  grpc::Status st = rw->Finish();
  if (st.ok() && !got) return grpc::Status(grpc::StatusCode::INTERNAL, "no response");
  return st;
}

// Must-show 6: TTL leases are revoked unless kept alive (from any replica).
// Issue 11: ACQUIRED's valid_for is unset for a hold without ttl (the proto
// says so; 0 s would tell a client that honours it to stop at once) and is
// the ttl for a lease.
TEST_F(LockServiceTest, AcquiredValidForIsUnsetWithoutTtlAndTheTtlWithOne) {
  {
    AcquireStream plain(s1_.get(), OpenMsg("valid-for", milliseconds(10000)));
    auto acq = plain.Await(AcquireEvent::ACQUIRED);
    ASSERT_TRUE(acq);
    EXPECT_FALSE(acq->acquired().has_valid_for()) << acq->ShortDebugString();
    EXPECT_TRUE(acq->acquired().has_session_timeout());
    plain.SendRelease();
    ASSERT_TRUE(plain.Await(AcquireEvent::RELEASED));
  }
  AcquireStream leased(s1_.get(), OpenMsg("valid-for", milliseconds(10000), "", milliseconds(1500)));
  auto acq = leased.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq);
  ASSERT_TRUE(acq->acquired().has_valid_for());
  EXPECT_EQ(acq->acquired().valid_for().seconds(), 1);
  EXPECT_EQ(acq->acquired().valid_for().nanos(), 500000000);
  leased.SendRelease();
  ASSERT_TRUE(leased.Await(AcquireEvent::RELEASED));
}

TEST_F(LockServiceTest, LeaseTtlRevokedUnlessKeptAliveThroughOtherReplica) {
  // Kept alive through replica 2 for 4x its ttl: still held.
  std::string lease;
  auto kept = Hold(s1_.get(), "ttl", nullptr, &lease, "kept", milliseconds(800));
  auto waiter = std::make_unique<AcquireStream>(s1_.get(), OpenMsg("ttl", milliseconds(30000)));
  ASSERT_TRUE(waiter->Next());
  auto until = std::chrono::steady_clock::now() + milliseconds(3200);
  int renewals = 0;
  while (std::chrono::steady_clock::now() < until) {
    v1::KeepAliveResponse resp;
    ASSERT_TRUE(KeepAliveOnce(s2_.get(), {lease}, &resp).ok());
    ASSERT_EQ(resp.leases_size(), 1);
    EXPECT_EQ(resp.leases(0).code(), 0) << resp.leases(0).message();
    EXPECT_EQ(resp.leases(0).valid_for().seconds() * 1000 + resp.leases(0).valid_for().nanos() / 1000000, 800);
    ++renewals;
    // The holder must not have been told anything.
    auto ev = kept->Next(milliseconds(250));
    ASSERT_FALSE(ev.has_value()) << ev->ShortDebugString();
  }
  EXPECT_GE(renewals, 8);
  // Kept alive through its own replica as well.
  v1::KeepAliveResponse resp;
  ASSERT_TRUE(KeepAliveOnce(s1_.get(), {lease}, &resp).ok());
  EXPECT_EQ(resp.leases(0).code(), 0);

  // Then stop: revoked with LEASE_EXPIRED, the waiter acquires.
  auto lost = kept->Await(AcquireEvent::LOST, milliseconds(5000));
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->lost().reason(), v1::Lost::LEASE_EXPIRED);
  ASSERT_TRUE(waiter->Await(AcquireEvent::ACQUIRED, milliseconds(5000)));
  // A revoked lease cannot be kept alive.
  ASSERT_TRUE(KeepAliveOnce(s2_.get(), {lease}, &resp).ok());
  EXPECT_EQ(resp.leases(0).code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  ASSERT_TRUE(KeepAliveOnce(s1_.get(), {lease}, &resp).ok());
  EXPECT_EQ(resp.leases(0).code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_TRUE(ContendersBecome("ttl", 1));
}

// Must-show 11: Describe and List.
TEST_F(LockServiceTest, DescribeListsHoldersAndWaitersInOrder) {
  auto before = std::chrono::system_clock::now() - std::chrono::seconds(5);
  v1::AcquireOpen open = OpenMsg("desc", milliseconds(30000), "alice");
  (*open.mutable_metadata())["job"] = "42";
  AcquireStream holder(s1_.get(), open);
  auto acq = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq);
  AcquireStream bob(s2_.get(), OpenMsg("desc", milliseconds(30000), "bob"));
  ASSERT_TRUE(bob.Next());
  AcquireStream carol(s1_.get(), OpenMsg("desc", milliseconds(30000), "carol"));
  ASSERT_TRUE(carol.Next());
  auto after = std::chrono::system_clock::now() + std::chrono::seconds(5);

  for (auto* stub : {s1_.get(), s2_.get()}) {
    grpc::ClientContext ctx;
    v1::DescribeRequest req;
    req.set_name("desc");
    v1::DescribeResponse d;
    ASSERT_TRUE(stub->Describe(&ctx, req, &d).ok());
    ASSERT_EQ(d.holders_size(), 1);
    ASSERT_EQ(d.waiters_size(), 2);
    EXPECT_EQ(d.holders(0).owner(), "alice");
    // The verified identity: the suite's certificate in mTLS mode, none
    // over plaintext.
    EXPECT_EQ(d.holders(0).identity(), MtlsMode() ? kMtlsSuiteIdentity : "");
    EXPECT_EQ(d.holders(0).metadata().at("job"), "42");
    EXPECT_EQ(d.holders(0).fencing_token(), acq->acquired().fencing_token());
    EXPECT_EQ(d.holders(0).replica_id(), r1_->config().replica_id);
    EXPECT_EQ(d.holders(0).position(), 1);
    EXPECT_EQ(d.waiters(0).owner(), "bob");
    EXPECT_EQ(d.waiters(0).replica_id(), r2_->config().replica_id);
    EXPECT_EQ(d.waiters(1).owner(), "carol");
    EXPECT_EQ(d.waiters(0).position(), 2);
    EXPECT_EQ(d.waiters(1).position(), 3);
    EXPECT_LT(d.holders(0).fencing_token(), d.waiters(0).fencing_token());
    EXPECT_LT(d.waiters(0).fencing_token(), d.waiters(1).fencing_token());
    for (const auto& c : {d.holders(0), d.waiters(0), d.waiters(1)}) {
      auto since = std::chrono::system_clock::time_point(std::chrono::seconds(c.since().seconds()));
      EXPECT_GT(since, before);
      EXPECT_LT(since, after);
    }
  }

  std::vector<std::unique_ptr<AcquireStream>> more;
  for (const char* n : {"app/b", "app/a", "other"}) more.push_back(Hold(s2_.get(), n));
  auto list = [&](const std::string& prefix, int limit) {
    grpc::ClientContext ctx;
    v1::ListRequest req;
    req.set_prefix(prefix);
    req.set_limit(limit);
    v1::ListResponse resp;
    EXPECT_TRUE(s1_->List(&ctx, req, &resp).ok());
    return resp;
  };
  auto app = list("app/", 0);
  EXPECT_EQ(std::vector<std::string>(app.names().begin(), app.names().end()),
            (std::vector<std::string>{"app/a", "app/b"}));
  EXPECT_FALSE(app.truncated());
  auto all = list("", 0);
  EXPECT_EQ(std::vector<std::string>(all.names().begin(), all.names().end()),
            (std::vector<std::string>{"app/a", "app/b", "desc", "other"}));
  auto one = list("", 1);
  EXPECT_EQ(one.names_size(), 1);
  EXPECT_TRUE(one.truncated());
  // A released lock disappears from List at once (even before ZooKeeper
  // reaps its empty container node).
  more[2]->SendRelease();
  ASSERT_TRUE(more[2]->Await(AcquireEvent::RELEASED));
  auto after_release = list("", 0);
  EXPECT_EQ(after_release.names_size(), 3);
}

// List among many empty lock nodes (left for ZooKeeper to reap): only locks
// with contenders are listed, in name order, across check batches; its
// ZooKeeper reads follow the answer (one batch for a small limit), not the
// number of lock nodes.
TEST_F(LockServiceTest, ListSkipsEmptyLockNodesAndStopsEarly) {
  const size_t kEmpty = 3 * LockEngine::kListBatch;
  for (size_t i = 0; i < kEmpty; ++i) {
    ASSERT_EQ(zk_->Create(LockPath(absl::StrCat("many/", 1000 + i)), "", CreateMode::kPersistent),
              ZkCode::kOk);
  }
  // Live locks: the first two names, one in the third batch, and the last.
  std::vector<std::unique_ptr<AcquireStream>> live;
  for (const char* n : {"many/0000", "many/0001", "many/1300x", "many/zzzz"}) {
    live.push_back(Hold(s2_.get(), n));
  }
  auto list = [&](int limit) {
    grpc::ClientContext ctx;
    v1::ListRequest req;
    req.set_prefix("many/");
    req.set_limit(limit);
    v1::ListResponse resp;
    EXPECT_TRUE(s1_->List(&ctx, req, &resp).ok());
    return resp;
  };
  auto names = [](const v1::ListResponse& r) {
    return std::vector<std::string>(r.names().begin(), r.names().end());
  };
  auto exists_calls = [&] { return r1_->zk().call_count(ZkOp::kExists); };

  uint64_t before = exists_calls();
  auto all = list(0);
  EXPECT_EQ(names(all), (std::vector<std::string>{"many/0000", "many/0001", "many/1300x", "many/zzzz"}));
  EXPECT_FALSE(all.truncated());
  EXPECT_EQ(exists_calls() - before, kEmpty + 4) << "every candidate checked once";

  before = exists_calls();
  auto first = list(1);
  EXPECT_EQ(names(first), (std::vector<std::string>{"many/0000"}));
  EXPECT_TRUE(first.truncated());
  EXPECT_EQ(exists_calls() - before, LockEngine::kListBatch)
      << "limit + 1 live locks known after the first batch: no more reads";

  auto two = list(2);  // the third live lock is two batches further
  EXPECT_EQ(names(two), (std::vector<std::string>{"many/0000", "many/0001"}));
  EXPECT_TRUE(two.truncated());
  auto four = list(4);
  EXPECT_EQ(names(four).size(), 4u);
  EXPECT_FALSE(four.truncated());
}

// Fencing tokens keep increasing when the lock's node is deleted and made
// again (czxid is global; a per-lock sequence would restart at 0).
TEST_F(LockServiceTest, FencingTokensIncreaseAcrossARecreatedLockNode) {
  uint64_t first = 0, second = 0;
  {
    auto h = Hold(s1_.get(), "recreated", &first);
    h->SendRelease();
    ASSERT_TRUE(h->Await(AcquireEvent::RELEASED));
  }
  // The empty container would be reaped later; delete it now.
  ASSERT_EQ(zk_->Delete(LockPath("recreated")), ZkCode::kOk);
  ASSERT_FALSE(zk_->Exists(LockPath("recreated")).ok());
  auto h2 = Hold(s2_.get(), "recreated", &second);
  EXPECT_GT(second, first);
  auto nodes = zk_->Contenders(LockPath("recreated"));
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_TRUE(absl::EndsWith(nodes[0], "-0000000000")) << "the sequence restarted, the token did not";
}

// Server reflection answers (what grpcurl uses): a raw
// grpc.reflection.v1alpha ServerReflectionInfo list_services call.
TEST_F(LockServiceTest, ReflectionListsTheLockService) {
  auto channel = grpc::CreateChannel(r1_->address(), TestChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call = stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  // ServerReflectionRequest{list_services: ""}: field 7, length 0.
  grpc::Slice req_slice(std::string("\x3a\x00", 2));
  grpc::ByteBuffer req(&req_slice, 1);
  call->Write(req, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer resp;
  call->Read(&resp, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(resp.Dump(&slices).ok());
  std::string bytes;
  for (auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  EXPECT_NE(bytes.find("turnstile.v1.LockService"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  ctx.TryCancel();
  grpc::Status st;
  call->Finish(&st, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok)) {
    if (tag == reinterpret_cast<void*>(4)) break;
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}


// Issue 20: turnstiled serves every RPC with the completion-queue API on one
// thread. gRPC 1.51's callback API runs reactors on two "nexting_thread"s
// that hand the poller to each other on every event (a context switch per
// message); a turnstiled that served Acquire streams, unary calls and
// health checks must have no such thread (with the callback service it
// had two).
TEST_F(LockServiceTest, TurnstiledRunsNoCallbackApiThreads) {
  auto p = ChildProcess::Spawn(
      {"/bin/sh", "-c",
       absl::StrCat("exec '", TestBinary("turnstiled"),
                    "' --listen 127.0.0.1:0 --metrics-listen '' --zk '", zk_connect_,
                    "' --zk-root '", UniqueRoot("onethread"), "' 2>&1")});
  ASSERT_TRUE(p);
  // The child inherits the test mode's TURNSTILE_TLS_* variables.
  absl::StatusOr<std::string> address = AwaitReplicaServing(*p);
  ASSERT_TRUE(address.ok()) << address.status();
  auto channel = grpc::CreateChannel(*address, TestChannelCredentials());
  auto stub = v1::LockService::NewStub(channel);
  auto health = grpc::health::v1::Health::NewStub(channel);
  {
    // An unknown health service is NOT_FOUND, as with gRPC's built-in one.
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("no-such-service");
    grpc::health::v1::HealthCheckResponse resp;
    EXPECT_EQ(health->Check(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  for (int i = 0; i < 20; ++i) {
    AcquireStream s(stub.get(), OpenMsg("one-thread", milliseconds(10000)));
    ASSERT_TRUE(s.Await(AcquireEvent::ACQUIRED)) << i;
    s.SendRelease();
    ASSERT_TRUE(s.Await(AcquireEvent::RELEASED)) << i;
  }
  {
    AcquireStream held(stub.get(), OpenMsg("one-thread", milliseconds(10000), "holder"));
    ASSERT_TRUE(held.Await(AcquireEvent::ACQUIRED));
    grpc::ClientContext ctx;
    v1::DescribeRequest req;
    req.set_name("one-thread");
    v1::DescribeResponse resp;
    grpc::Status st = stub->Describe(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(resp.holders_size(), 1);
    EXPECT_EQ(resp.holders(0).owner(), "holder");
    grpc::ClientContext list_ctx;
    v1::ListRequest list_req;
    v1::ListResponse list_resp;
    st = stub->List(&list_ctx, list_req, &list_resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(list_resp.names_size(), 1);
    held.SendRelease();
    ASSERT_TRUE(held.Await(AcquireEvent::RELEASED));
  }

  std::vector<std::string> names;
  const std::string tasks = absl::StrCat("/proc/", p->pid(), "/task");
  DIR* dir = opendir(tasks.c_str());
  ASSERT_NE(dir, nullptr) << tasks;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(tasks + "/" + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    names.push_back(name);
  }
  closedir(dir);
  EXPECT_GT(names.size(), 1u);
  for (const auto& n : names) EXPECT_NE(n, "nexting_thread") << "a callback-API thread runs";
  // The replica's own threads, as deploy/README.md names them: file
  // reloads and heap trims have a thread apart from the sessions' loops,
  // which run the engine's timers (no thread of timers of their own).
  for (const char* own : {"ts-grpc-cq", "ts-zk-0", "ts-housekeep"}) {
    EXPECT_EQ(std::count(names.begin(), names.end(), own), 1) << own;
  }
  EXPECT_EQ(std::count(names.begin(), names.end(), "ts-timers-0"), 0);

  p->Signal(SIGTERM);
  auto rc = p->Wait(milliseconds(20000));
  ASSERT_TRUE(rc) << "turnstiled did not stop on SIGTERM";
  EXPECT_EQ(*rc, 0);
}

// Issue 24 must-show 5: a holder whose client stops reading its stream for
// 60 s (TURNSTILE_STALL_SECONDS) costs the replica one pending STILL_HELD,
// not one per heartbeat: the older ones are dropped (and counted), and
// when the client reads again it gets a handful of refreshes, not all of
// them; the hold is intact and releases normally.

TEST(StalledReader, KeepsOnePendingStillHeldAndReleasesAfterResuming) {
  int seconds = 60;
  if (const char* v = std::getenv("TURNSTILE_STALL_SECONDS")) seconds = std::max(5, std::atoi(v));
  ReplicaConfig cfg = TestConfig(SharedZkServer().ConnectString(), UniqueRoot("stalled"));
  cfg.zk_session_timeout = milliseconds(1000);  // a STILL_HELD every 200 ms
  auto replica = StartReplica(cfg);
  ASSERT_TRUE(replica);
  // A client whose HTTP/2 window is small, so that the replica's writes
  // stop once it stops reading (instead of filling a 64 KiB window).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto stub = v1::LockService::NewStub(
      grpc::CreateCustomChannel(replica->address(), TestChannelCredentials(), args));
  grpc::ClientContext ctx;
  auto rw = stub->Acquire(&ctx);
  v1::AcquireRequest open;
  *open.mutable_open() = OpenMsg("stalled", milliseconds(10000), "sleepy");
  ASSERT_TRUE(rw->Write(open));
  v1::AcquireEvent ev;
  ASSERT_TRUE(rw->Read(&ev));
  ASSERT_EQ(ev.type(), v1::AcquireEvent::ACQUIRED);
  const uint64_t token = ev.acquired().fencing_token();
  LockServiceImpl& svc = replica->service();
  const uint64_t dropped_before = svc.still_held_dropped();
  const auto stalled_at = std::chrono::steady_clock::now();
  // Not reading. Refreshes come every 200 ms: over the stall all but a
  // few (those the transport took before the window closed) are dropped.
  // The stall lasts until 95 % of `seconds` worth of refreshes were
  // dropped, so about `seconds` long. The process's resident memory (this
  // process hosts the replica) is read a tenth of the way in and at the
  // end: reported, the proof of "one pending" is the count delivered after
  // resuming, below.
  const uint64_t expect_dropped = static_cast<uint64_t>(seconds) * 5 * 95 / 100;
  auto dropped_now = [&] { return svc.still_held_dropped() - dropped_before; };
  ASSERT_TRUE(WaitFor([&] { return dropped_now() >= expect_dropped / 10; },
                      milliseconds((seconds + 30) * 1000)));
  const long rss_early_kb = ResidentKb();
  ASSERT_TRUE(WaitFor([&] { return dropped_now() >= expect_dropped; },
                      milliseconds((seconds + 30) * 1000)))
      << "only " << dropped_now() << " dropped";
  const long rss_late_kb = ResidentKb();
  const double stalled_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stalled_at).count();
  const uint64_t dropped = dropped_now();
  // Still held meanwhile.
  {
    grpc::ClientContext dctx;
    v1::DescribeRequest req;
    req.set_name("stalled");
    v1::DescribeResponse d;
    ASSERT_TRUE(NewStub(replica->address())->Describe(&dctx, req, &d).ok());
    ASSERT_EQ(d.holders_size(), 1);
    EXPECT_EQ(d.holders(0).fencing_token(), token);
  }
  // Reading again: a few refreshes, then the release goes through.
  v1::AcquireRequest release;
  release.mutable_release();
  ASSERT_TRUE(rw->Write(release));
  int refreshes = 0;
  bool released = false;
  while (rw->Read(&ev)) {
    if (ev.type() == v1::AcquireEvent::STILL_HELD) ++refreshes;
    if (ev.type() == v1::AcquireEvent::RELEASED) released = true;
    ASSERT_NE(ev.type(), v1::AcquireEvent::LOST);
  }
  EXPECT_TRUE(rw->Finish().ok());
  EXPECT_TRUE(released);
  std::printf("stalled %.0f s: %llu STILL_HELD dropped, %d delivered after resuming; resident "
              "memory %ld kB a tenth of the way in, %ld kB at the end\n",
              stalled_s, static_cast<unsigned long long>(dropped), refreshes, rss_early_kb,
              rss_late_kb);
  EXPECT_LT(refreshes, 40) << "refreshes piled up while the client did not read";
  EXPECT_GT(refreshes, 0);
}

}  // namespace
}  // namespace turnstile::testing
