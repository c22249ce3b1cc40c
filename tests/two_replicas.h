// A fixture shared by the integration tests that contend through two
// replicas on one root of the shared real ZooKeeper (herd, kinds,
// semaphores), and ZooKeeper's `mntr` counters as numbers. Test-only.
#ifndef TURNSTILE_TESTS_TWO_REPLICAS_H_
#define TURNSTILE_TESTS_TWO_REPLICAS_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "server/recipe/lock_name.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {

// ZooKeeper's `mntr` value for `key` as an integer (a test failure if it
// has no such key; averages are truncated).
inline int64_t MntrValue(const std::string& key) {
  auto m = SharedZkServer().Mntr();
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok() || !m->count(key)) {
    ADD_FAILURE() << "mntr has no " << key;
    return -1;
  }
  int64_t v = 0;
  double d = 0;
  if (!absl::SimpleAtoi(m->at(key), &v) && absl::SimpleAtod(m->at(key), &d)) {
    v = static_cast<int64_t>(d);
  }
  return v;
}

// Two replicas (r1_, r2_) on a root of their own (named after `tag`), a
// stub to each, and a synchronous ZooKeeper view.
class TwoReplicaTest : public ::testing::Test {
 protected:
  explicit TwoReplicaTest(std::string tag) : tag_(std::move(tag)) {}
  void SetUp() override {
    connect_ = SharedZkServer().ConnectString();
    root_ = UniqueRoot(tag_);
    r1_ = StartReplica(TestConfig(connect_, root_));
    r2_ = StartReplica(TestConfig(connect_, root_));
    ASSERT_TRUE(r1_ && r2_);
    s1_ = NewStub(r1_->address());
    s2_ = NewStub(r2_->address());
    zk_ = std::make_unique<SyncZk>(connect_);
  }
  std::string LockPath(const std::string& name) const {
    return root_ + "/" + EncodeLockName(name);
  }
  // Waits (`timeout` at most) until `name` has `n` contender nodes.
  bool ContendersBecome(const std::string& name, size_t n,
                        milliseconds timeout = milliseconds(20000)) {
    return WaitFor([&] { return zk_->Contenders(LockPath(name)).size() == n; }, timeout);
  }
  static grpc::Status Describe(v1::LockService::Stub* stub, const std::string& name,
                               v1::DescribeResponse* resp) {
    grpc::ClientContext ctx;
    v1::DescribeRequest req;
    req.set_name(name);
    return stub->Describe(&ctx, req, resp);
  }
  // Nothing but QUEUED arrived (and nothing is pending), and the stream is open.
  static bool StillWaiting(AcquireStream& s) {
    while (auto ev = s.Next(milliseconds(0))) {
      if (ev->type() != AcquireEvent::QUEUED) return false;
    }
    return !s.ended();
  }

  const std::string tag_;
  std::string connect_, root_;
  std::unique_ptr<Replica> r1_, r2_;
  std::unique_ptr<v1::LockService::Stub> s1_, s2_;
  std::unique_ptr<SyncZk> zk_;
};

}  // namespace turnstile::testing

#endif  // TURNSTILE_TESTS_TWO_REPLICAS_H_
