// CheckToken, the fencing-token check for resource servers, through gRPC
// against in-process replicas on a real ZooKeeper: its verdicts (CURRENT,
// SUPERSEDED, WAITING), linearizable and stale answers, and the codes for
// bad input, a refused identity and a ZooKeeper outage. Then the engine's
// check over the in-memory ZooKeeper (tests/fake_zk_session.h), for the
// orders a real one produces only by chance (a holder or a waiter gone
// between the listing and its read) and for what a check reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/lib/client.h"
#include "client/lib/tls.h"
#include "server/recipe/lock_name.h"
#include "server/replica.h"
#include "tests/fake_zk_session.h"
#include "tests/test_pki.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

using v1::AcquireEvent;
using v1::CheckTokenResponse;

grpc::Status Check(v1::LockService::Stub* stub, const std::string& name, uint64_t token,
                   CheckTokenResponse* resp, bool stale = false) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::CheckTokenRequest req;
  req.set_name(name);
  req.set_fencing_token(token);
  req.set_allow_stale(stale);
  return stub->CheckToken(&ctx, req, resp);
}

// The verdict, or -code for an error (so EXPECT_EQ shows both).
int Verdict(v1::LockService::Stub* stub, const std::string& name, uint64_t token,
            bool stale = false) {
  CheckTokenResponse r;
  grpc::Status s = Check(stub, name, token, &r, stale);
  if (!s.ok()) return -static_cast<int>(s.error_code());
  return static_cast<int>(r.verdict());
}
constexpr int kCurrent = CheckTokenResponse::CURRENT;
constexpr int kSuperseded = CheckTokenResponse::SUPERSEDED;
constexpr int kWaiting = CheckTokenResponse::WAITING;

class CheckTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    zk_connect_ = SharedZkServer().ConnectString();
    root_ = UniqueRoot("check");
    r1_ = StartReplica(TestConfig(zk_connect_, root_));
    r2_ = StartReplica(TestConfig(zk_connect_, root_));
    ASSERT_TRUE(r1_ && r2_);
    s1_ = NewStub(r1_->address());
    s2_ = NewStub(r2_->address());
  }

  std::unique_ptr<AcquireStream> Hold(v1::LockService::Stub* stub, const std::string& name,
                                      uint64_t* token,
                                      v1::LockKind kind = v1::LOCK_KIND_EXCLUSIVE) {
    v1::AcquireOpen open = OpenMsg(name, milliseconds(30000), "holder");
    open.set_kind(kind);
    auto s = std::make_unique<AcquireStream>(stub, open);
    auto ev = s->Await(AcquireEvent::ACQUIRED);
    EXPECT_TRUE(ev.has_value()) << "not acquired: " << name;
    if (ev) *token = ev->acquired().fencing_token();
    return s;
  }
  // A waiter queued behind the holder: its stream, once QUEUED.
  std::unique_ptr<AcquireStream> Queue(v1::LockService::Stub* stub, const std::string& name) {
    auto s = std::make_unique<AcquireStream>(stub, OpenMsg(name, milliseconds(60000), "waiter"));
    EXPECT_TRUE(s->Next().has_value()) << "no QUEUED for a waiter of " << name;
    return s;
  }
  // The waiters' tokens (their nodes' czxids) in queue order, by Describe.
  std::vector<uint64_t> WaiterTokens(const std::string& name) {
    grpc::ClientContext ctx;
    v1::DescribeRequest req;
    req.set_name(name);
    v1::DescribeResponse d;
    EXPECT_TRUE(s1_->Describe(&ctx, req, &d).ok());
    std::vector<uint64_t> out;
    for (const auto& w : d.waiters()) out.push_back(w.fencing_token());
    return out;
  }

  std::string zk_connect_, root_;
  std::unique_ptr<Replica> r1_, r2_;
  std::unique_ptr<v1::LockService::Stub> s1_, s2_;
};

TEST_F(CheckTokenTest, AHoldersTokenIsCurrentFromEveryReplica) {
  uint64_t token = 0;
  auto holder = Hold(s1_.get(), "res", &token);
  for (auto* stub : {s1_.get(), s2_.get()}) {
    CheckTokenResponse r;
    ASSERT_TRUE(Check(stub, "res", token, &r).ok());
    EXPECT_EQ(r.verdict(), CheckTokenResponse::CURRENT);
    EXPECT_EQ(r.highest_holder_token(), token);
    EXPECT_TRUE(r.linearizable());
  }
  // A lock nobody ever took, and another lock's token.
  EXPECT_EQ(Verdict(s1_.get(), "never-taken", token), kSuperseded);
  uint64_t other = 0;
  auto other_holder = Hold(s2_.get(), "res-other", &other);
  EXPECT_EQ(Verdict(s1_.get(), "res", other), kSuperseded);
  EXPECT_EQ(Verdict(s1_.get(), "res-other", token), kSuperseded);
  EXPECT_EQ(Verdict(s1_.get(), "res-other", other), kCurrent);
}

TEST_F(CheckTokenTest, AReleasedTokenIsSupersededAndStaysSo) {
  uint64_t old_token = 0;
  auto holder = Hold(s1_.get(), "rel", &old_token);
  ASSERT_EQ(Verdict(s2_.get(), "rel", old_token), kCurrent);
  holder->SendRelease();
  ASSERT_TRUE(holder->Await(AcquireEvent::RELEASED).has_value());
  // Linearizable: RELEASED was announced before the call, so no replica
  // may answer CURRENT any more.
  EXPECT_EQ(Verdict(s1_.get(), "rel", old_token), kSuperseded);
  EXPECT_EQ(Verdict(s2_.get(), "rel", old_token), kSuperseded);
  CheckTokenResponse r;
  ASSERT_TRUE(Check(s2_.get(), "rel", old_token, &r).ok());
  EXPECT_EQ(r.highest_holder_token(), 0u);
  // The next holder's token is higher; the old one stays superseded.
  uint64_t new_token = 0;
  auto next = Hold(s2_.get(), "rel", &new_token);
  EXPECT_GT(new_token, old_token);
  ASSERT_TRUE(Check(s1_.get(), "rel", old_token, &r).ok());
  EXPECT_EQ(r.verdict(), CheckTokenResponse::SUPERSEDED);
  EXPECT_EQ(r.highest_holder_token(), new_token);
  EXPECT_EQ(Verdict(s1_.get(), "rel", new_token), kCurrent);
}

TEST_F(CheckTokenTest, AKilledHoldersTokenIsSupersededOnceTheNextIsGranted) {
  uint64_t old_token = 0;
  auto holder = Hold(s1_.get(), "killed", &old_token);
  auto waiter = Queue(s2_.get(), "killed");
  holder->Cancel();  // the client is gone: its stream breaks
  auto granted = waiter->Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(granted.has_value());
  const uint64_t new_token = granted->acquired().fencing_token();
  EXPECT_GT(new_token, old_token);
  for (auto* stub : {s1_.get(), s2_.get()}) {
    CheckTokenResponse r;
    ASSERT_TRUE(Check(stub, "killed", old_token, &r).ok());
    EXPECT_EQ(r.verdict(), CheckTokenResponse::SUPERSEDED);
    EXPECT_EQ(r.highest_holder_token(), new_token);
    EXPECT_EQ(Verdict(stub, "killed", new_token), kCurrent);
  }
}

// A waiter's token (which a client never gets before ACQUIRED) is WAITING,
// found among many waiters; a departed waiter's and an unknown token are
// SUPERSEDED.
TEST_F(CheckTokenTest, AWaitersTokenIsWaitingAmongManyWaiters) {
  uint64_t holder_token = 0;
  auto holder = Hold(s1_.get(), "queue", &holder_token);
  std::vector<std::unique_ptr<AcquireStream>> waiters;
  for (int i = 0; i < 9; ++i) waiters.push_back(Queue(i % 2 ? s1_.get() : s2_.get(), "queue"));
  std::vector<uint64_t> tokens = WaiterTokens("queue");
  ASSERT_EQ(tokens.size(), 9u);
  for (uint64_t t : tokens) {
    EXPECT_GT(t, holder_token);
    EXPECT_EQ(Verdict(s2_.get(), "queue", t), kWaiting) << t;
    EXPECT_EQ(Verdict(s1_.get(), "queue", t, /*stale=*/true), kWaiting) << t;
  }
  EXPECT_EQ(Verdict(s2_.get(), "queue", holder_token), kCurrent);
  // Tokens next to real ones, below the holder's and above the last.
  EXPECT_EQ(Verdict(s2_.get(), "queue", holder_token - 1), kSuperseded);
  EXPECT_EQ(Verdict(s2_.get(), "queue", tokens.back() + 1), kSuperseded);
  EXPECT_EQ(Verdict(s2_.get(), "queue", tokens[4] + 1), tokens[5] == tokens[4] + 1
                                                            ? kWaiting : kSuperseded);
  // Waiters 3 and 6 give up: their tokens are gone, the others still wait.
  waiters[3]->Cancel();
  waiters[6]->Cancel();
  ASSERT_TRUE(WaitFor([&] { return WaiterTokens("queue").size() == 7; }, milliseconds(15000)));
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(Verdict(s1_.get(), "queue", tokens[i]), i == 3 || i == 6 ? kSuperseded : kWaiting)
        << "waiter " << i;
  }
  CheckTokenResponse r;
  ASSERT_TRUE(Check(s1_.get(), "queue", tokens[0], &r).ok());
  EXPECT_EQ(r.highest_holder_token(), holder_token);
}

// Readers hold together: each reader's token is CURRENT, the writer
// queued behind them WAITING; highest_holder_token is the later reader's.
TEST_F(CheckTokenTest, EverySharedHolderIsCurrent) {
  uint64_t r1 = 0, r2 = 0;
  auto reader1 = Hold(s1_.get(), "rw", &r1, v1::LOCK_KIND_SHARED);
  auto reader2 = Hold(s2_.get(), "rw", &r2, v1::LOCK_KIND_SHARED);
  auto writer = Queue(s1_.get(), "rw");
  std::vector<uint64_t> w = WaiterTokens("rw");
  ASSERT_EQ(w.size(), 1u);
  for (uint64_t t : {r1, r2}) {
    CheckTokenResponse r;
    ASSERT_TRUE(Check(s1_.get(), "rw", t, &r).ok());
    EXPECT_EQ(r.verdict(), CheckTokenResponse::CURRENT);
    EXPECT_EQ(r.highest_holder_token(), std::max(r1, r2));
  }
  EXPECT_EQ(Verdict(s2_.get(), "rw", w[0]), kWaiting);
  reader1->SendRelease();
  ASSERT_TRUE(reader1->Await(AcquireEvent::RELEASED).has_value());
  EXPECT_EQ(Verdict(s2_.get(), "rw", r1), kSuperseded);
  EXPECT_EQ(Verdict(s2_.get(), "rw", r2), kCurrent);
}

TEST_F(CheckTokenTest, AllowStaleAnswersWithoutTheSync) {
  uint64_t token = 0;
  auto holder = Hold(s1_.get(), "stale", &token);
  CheckTokenResponse r;
  ASSERT_TRUE(Check(s2_.get(), "stale", token, &r, /*stale=*/true).ok());
  EXPECT_EQ(r.verdict(), CheckTokenResponse::CURRENT);
  EXPECT_FALSE(r.linearizable());
  EXPECT_EQ(r.highest_holder_token(), token);
  ASSERT_TRUE(Check(s2_.get(), "stale", token, &r, /*stale=*/false).ok());
  EXPECT_TRUE(r.linearizable());
  holder->SendRelease();
  ASSERT_TRUE(holder->Await(AcquireEvent::RELEASED).has_value());
  ASSERT_TRUE(Check(s1_.get(), "stale", token, &r, /*stale=*/true).ok());
  EXPECT_EQ(r.verdict(), CheckTokenResponse::SUPERSEDED);
  EXPECT_FALSE(r.linearizable());
}

TEST_F(CheckTokenTest, BadInputIsInvalidArgument) {
  CheckTokenResponse r;
  grpc::Status s = Check(s1_.get(), "", 5, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("name"), std::string::npos) << s.error_message();
  s = Check(s1_.get(), "res", 0, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("fencing_token"), std::string::npos) << s.error_message();
  s = Check(s1_.get(), std::string(2000, 'x'), 5, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  s = Check(s1_.get(), std::string("a\0b", 3), 5, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
}

// A check during a ZooKeeper outage: UNAVAILABLE (the answer is unknown),
// whether or not the replica has noticed the outage yet; answers again
// once ZooKeeper is back.
TEST(CheckTokenOutageTest, ACheckDuringAZooKeeperOutageIsUnavailable) {
  auto server = ZkServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ReplicaConfig cfg = TestConfig((*server)->ConnectString(), UniqueRoot("check-outage"));
  cfg.zk_session_timeout = milliseconds(20000);
  auto r = StartReplica(cfg);
  ASSERT_TRUE(r);
  auto stub = NewStub(r->address());
  auto holder = std::make_unique<AcquireStream>(stub.get(), OpenMsg("out", milliseconds(10000)));
  auto ev = holder->Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(ev.has_value());
  const uint64_t token = ev->acquired().fencing_token();
  ASSERT_EQ(Verdict(stub.get(), "out", token), kCurrent);
  ASSERT_TRUE((*server)->Stop().ok());
  // Before the replica notices: the sync cannot complete.
  EXPECT_EQ(Verdict(stub.get(), "out", token), -static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  ASSERT_TRUE(WaitFor([&] { return !IsServing(r->address()); }, milliseconds(20000)));
  // Known disconnected: refused at once, stale or not.
  CheckTokenResponse resp;
  grpc::Status s = Check(stub.get(), "out", token, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_EQ(Verdict(stub.get(), "out", token, /*stale=*/true),
            -static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  ASSERT_TRUE((*server)->Restart().ok());
  ASSERT_TRUE(WaitFor([&] { return IsServing(r->address()); }, milliseconds(30000)));
  // The session survived: the hold and its token are still current.
  EXPECT_EQ(Verdict(stub.get(), "out", token), kCurrent);
}

// The C++ library's CheckToken: the verdicts, highest_holder_token,
// linearizable, and the server's codes as its status.
TEST_F(CheckTokenTest, TheCppLibraryChecksTokens) {
  client::ClientOptions o;
  o.target = r2_->address();
  auto c = client::Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  uint64_t token = 0;
  auto holder = Hold(s1_.get(), "lib", &token);
  auto waiter = Queue(s1_.get(), "lib");
  std::vector<uint64_t> w = WaiterTokens("lib");
  ASSERT_EQ(w.size(), 1u);
  absl::StatusOr<client::TokenCheck> r = (*c)->CheckToken("lib", token);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->current());
  EXPECT_EQ(r->verdict, client::TokenCheck::Verdict::kCurrent);
  EXPECT_EQ(r->highest_holder_token, token);
  EXPECT_TRUE(r->linearizable);
  r = (*c)->CheckToken("lib", w[0], /*allow_stale=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict, client::TokenCheck::Verdict::kWaiting);
  EXPECT_STREQ(client::VerdictName(r->verdict), "WAITING");
  EXPECT_FALSE(r->linearizable);
  holder->Cancel();
  ASSERT_TRUE(waiter->Await(AcquireEvent::ACQUIRED).has_value());
  r = (*c)->CheckToken("lib", token);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->current());
  EXPECT_EQ(r->verdict, client::TokenCheck::Verdict::kSuperseded);
  EXPECT_EQ(r->highest_holder_token, w[0]);
  EXPECT_EQ((*c)->CheckToken("lib", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*c)->CheckToken("", 5).status().code(), absl::StatusCode::kInvalidArgument);
}

// A caller whose policy does not allow `describe` on the name is refused
// with PERMISSION_DENIED before ZooKeeper is touched.
TEST(CheckTokenAuthzTest, ACallerThatMayNotDescribeIsPermissionDenied) {
  TestPki pki;
  TestPki::Files server_files = pki.IssueServer();
  auto client_cert = [&](const std::string& identity) {
    return pki.IssueClient(identity.substr(identity.rfind('/') + 1), identity);
  };
  const std::string kOwner = "spiffe://acme.test/team/ledger/writer";
  const std::string kStranger = "spiffe://acme.test/team/search/indexer";
  TestPki::Files owner = client_cert(kOwner);
  TestPki::Files stranger = client_cert(kStranger);
  const std::string policy = pki.dir() + "/policy.json";
  std::ofstream(policy) << R"({"rules": [
    {"identities": ["spiffe://acme.test/team/ledger/*"], "locks": ["ledger/"],
     "actions": ["acquire", "describe"]},
    {"identities": ["spiffe://acme.test/team/search/*"], "locks": ["search/"],
     "actions": ["acquire", "describe"]}
  ]})";
  ReplicaConfig cfg = TestConfig(SharedZkServer().ConnectString(), UniqueRoot("check-authz"));
  cfg.tls_cert_file = server_files.cert;
  cfg.tls_key_file = server_files.key;
  cfg.tls_client_ca_file = pki.ca_file();
  cfg.authz_file = policy;
  auto r = StartReplica(cfg);
  ASSERT_TRUE(r);
  const std::string address = absl::StrCat("127.0.0.1:", r->port());
  auto stub_as = [&](const TestPki::Files& f) {
    auto creds = client::MakeChannelCredentials({pki.ca_file(), f.cert, f.key});
    EXPECT_TRUE(creds.ok()) << creds.status();
    return v1::LockService::NewStub(grpc::CreateChannel(address, *creds));
  };
  auto as_owner = stub_as(owner);
  auto as_stranger = stub_as(stranger);
  AcquireStream holder(as_owner.get(), OpenMsg("ledger/main", milliseconds(10000)));
  auto ev = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(ev.has_value());
  const uint64_t token = ev->acquired().fencing_token();
  EXPECT_EQ(Verdict(as_owner.get(), "ledger/main", token), kCurrent);
  CheckTokenResponse resp;
  grpc::Status s = Check(as_stranger.get(), "ledger/main", token, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find(kStranger), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("describe"), std::string::npos) << s.error_message();
  // Its own prefix it may check.
  EXPECT_EQ(Verdict(as_stranger.get(), "search/x", token), kSuperseded);
}

// ---------------------------------------------------------------------------
// The engine's check over the in-memory ZooKeeper.

constexpr milliseconds kFakeDeadline{10000};

class CheckTokenFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    zk_ = std::make_unique<FakeZkSession>(&server_);
    EngineOptions options;
    options.root = "/t";
    options.check_invariants = true;
    engine_ = std::make_unique<LockEngine>(zk_.get(), options);
    ASSERT_TRUE(zk_->Start().ok());
    ASSERT_TRUE(WaitFor([&] { return engine_->serving(); }, kFakeDeadline));
  }
  void TearDown() override {
    zk_->Close();
    engine_.reset();  // stops its timers first
  }

  // `n` exclusive contenders of lock `name`, created in queue order (so
  // their czxids grow); their tokens.
  std::vector<uint64_t> Queue(const std::string& name, int n) {
    const std::string lock = "/t/" + EncodeLockName(name);
    EXPECT_EQ(server_.CreateNode(lock), ZkCode::kOk);
    std::vector<uint64_t> tokens;
    for (int i = 0; i < n; ++i) {
      const std::string path = lock + "/" +
                               ContenderNodePrefix(ContenderKind::kExclusive, NewContenderUid()) +
                               absl::StrFormat("%010d", i + 1);
      EXPECT_EQ(server_.CreateNode(path), ZkCode::kOk);
      paths_.push_back(path);
      tokens.push_back(static_cast<uint64_t>(server_.Stat(path)->czxid));
    }
    return tokens;
  }

  // One check in flight; Await gives its answer.
  struct Answer {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<absl::StatusOr<TokenCheck>> result;
    absl::StatusOr<TokenCheck> Await() {
      std::unique_lock<std::mutex> l(mu);
      if (!cv.wait_for(l, kFakeDeadline, [&] { return result.has_value(); })) {
        return absl::DeadlineExceededError("no answer");
      }
      return *result;
    }
  };
  std::shared_ptr<Answer> Start(uint64_t token, bool stale = true) {
    auto a = std::make_shared<Answer>();
    engine_->CheckToken("chk", token, stale, [a](absl::StatusOr<TokenCheck> r) {
      std::lock_guard<std::mutex> l(a->mu);
      a->result = std::move(r);
      a->cv.notify_all();
    });
    return a;
  }
  absl::StatusOr<TokenCheck> Check(uint64_t token, bool stale = true) {
    return Start(token, stale)->Await();
  }
  // Holds the replies of listings until released.
  void HoldListings() {
    zk_->SetHoldFilter([](const FakeItem& i) {
      return i.kind == FakeItem::Kind::kReply && i.op == ZkOp::kGetChildren;
    });
  }
  uint64_t HeldListing() {
    auto held = zk_->AwaitHeld([](const FakeItem& i) { return i.op == ZkOp::kGetChildren; },
                               kFakeDeadline);
    EXPECT_TRUE(held.has_value());
    zk_->SetHoldFilter(nullptr);
    return held ? held->id : 0;
  }

  FakeZkServer server_;
  std::unique_ptr<FakeZkSession> zk_;
  std::unique_ptr<LockEngine> engine_;
  std::vector<std::string> paths_;  // the contenders made by Queue, in order
};

// A holder's check reads one node; a waiter's a logarithmic number of
// them (binary search over the waiters); linearizable checks sync once.
TEST_F(CheckTokenFakeTest, ACheckReadsTheHolderAndSearchesTheWaiters) {
  std::vector<uint64_t> t = Queue("chk", 16);  // a holder and 15 waiters
  auto exists_calls = [&] { return zk_->call_count(ZkOp::kExists); };
  uint64_t before = exists_calls();
  absl::StatusOr<TokenCheck> r = Check(t[0]);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict, TokenCheck::Verdict::kCurrent);
  EXPECT_EQ(r->highest_holder_token, t[0]);
  EXPECT_EQ(exists_calls() - before, 1u);
  for (size_t i = 1; i < t.size(); ++i) {
    before = exists_calls();
    r = Check(t[i]);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->verdict, TokenCheck::Verdict::kWaiting) << i;
    EXPECT_EQ(r->highest_holder_token, t[0]);
    EXPECT_LE(exists_calls() - before, 1u + 4u) << "waiter " << i;  // log2(15) < 4
  }
  // Below the holder's: no waiter can have it, only the holder is read.
  before = exists_calls();
  r = Check(t[0] - 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict, TokenCheck::Verdict::kSuperseded);
  EXPECT_EQ(exists_calls() - before, 1u);
  // Above the last waiter's: searched, not found.
  for (uint64_t token : {t.back() + 1, t.back() + 1000}) {
    r = Check(token);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->verdict, TokenCheck::Verdict::kSuperseded) << token;
  }
  const uint64_t syncs = zk_->call_count(ZkOp::kSync);
  r = Check(t[3], /*stale=*/false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->linearizable);
  EXPECT_GE(zk_->call_count(ZkOp::kSync), syncs + 1);
}

// The holder leaves between the listing and its read: the check lists
// again and decides on the new holder (the next in line).
TEST_F(CheckTokenFakeTest, AHolderGoneBeforeItsReadMakesTheCheckListAgain) {
  std::vector<uint64_t> t = Queue("chk", 3);
  const uint64_t listings = zk_->call_count(ZkOp::kGetChildren);
  HoldListings();
  auto answer = Start(t[1]);
  const uint64_t held = HeldListing();
  ASSERT_EQ(server_.DeleteNode(paths_[0]), ZkCode::kOk);  // the holder leaves
  ASSERT_TRUE(zk_->Release(held));
  absl::StatusOr<TokenCheck> r = answer->Await();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict, TokenCheck::Verdict::kCurrent);
  EXPECT_EQ(r->highest_holder_token, t[1]);
  EXPECT_EQ(zk_->call_count(ZkOp::kGetChildren) - listings, 2u);
  // And the old holder's token, asked the same way, is superseded.
  HoldListings();
  answer = Start(t[0]);
  const uint64_t held2 = HeldListing();
  ASSERT_EQ(server_.DeleteNode(paths_[1]), ZkCode::kOk);
  ASSERT_TRUE(zk_->Release(held2));
  r = answer->Await();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict, TokenCheck::Verdict::kSuperseded);
  EXPECT_EQ(r->highest_holder_token, t[2]);
}

// A waiter that leaves during the search is passed over: its own token is
// SUPERSEDED, another waiter's still found.
TEST_F(CheckTokenFakeTest, AWaiterGoneDuringTheSearchIsPassedOver) {
  std::vector<uint64_t> t = Queue("chk", 8);  // a holder and waiters 1..7
  struct Case {
    size_t asked, gone;  // gone: the search's first probe, deleted after the listing
    TokenCheck::Verdict want;
  };
  // Waiters left: 1..7, then 1..3 5..7, then 1..3 6 7.
  for (const Case& c : {Case{5, 4, TokenCheck::Verdict::kWaiting},
                        Case{6, 5, TokenCheck::Verdict::kWaiting},
                        Case{3, 3, TokenCheck::Verdict::kSuperseded}}) {
    SCOPED_TRACE(c.asked);
    HoldListings();
    const uint64_t reads = zk_->call_count(ZkOp::kExists);
    auto answer = Start(t[c.asked]);
    const uint64_t held = HeldListing();
    ASSERT_EQ(server_.DeleteNode(paths_[c.gone]), ZkCode::kOk);
    ASSERT_TRUE(zk_->Release(held));
    absl::StatusOr<TokenCheck> r = answer->Await();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->verdict, c.want);
    EXPECT_EQ(r->highest_holder_token, t[0]);
    // The holder, the probe that found nothing, then a search of the rest.
    EXPECT_LE(zk_->call_count(ZkOp::kExists) - reads, 1u + 1u + 3u);
  }
}

// No session, or a failed sync: UNAVAILABLE (the answer is unknown).
TEST_F(CheckTokenFakeTest, AFailedSyncOrNoSessionIsUnavailable) {
  std::vector<uint64_t> t = Queue("chk", 1);
  zk_->LoseNextRequest(ZkOp::kSync, "");
  absl::StatusOr<TokenCheck> r = Check(t[0], /*stale=*/false);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("sync"), std::string::npos) << r.status();
  zk_->LoseNextRequest(ZkOp::kGetChildren, "chk");
  r = Check(t[0], /*stale=*/true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  zk_->Disconnect();
  r = Check(t[0], /*stale=*/true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  zk_->Reconnect();
  ASSERT_TRUE(WaitFor([&] { return zk_->connected(); }, kFakeDeadline));
  r = Check(t[0], /*stale=*/false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict, TokenCheck::Verdict::kCurrent);
}

}  // namespace
}  // namespace turnstile::testing
