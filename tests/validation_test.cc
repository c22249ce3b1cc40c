// SPEC §5: every bad input is validated before it touches ZooKeeper and gets
// its documented gRPC code and a message naming the field and the limit;
// nothing already held is disturbed and the replica stays healthy.
//
// Table-driven: every limit of an Acquire `open` is tried at AND past its
// boundary. Then the stream protocol, Release, KeepAlive, Describe, List, the
// per-lock contender limit (local and cluster-wide) and the per-replica
// stream limit. Every test holds a "sentinel" lock from its start and checks
// at its end (TearDown) that the sentinel was never told anything, that its
// node still exists, and that every replica still reports serving.
//
// Integration test: in-process replicas on the shared real ZooKeeper server,
// a fresh znode root per test.
#include <gtest/gtest.h>
#include <grpcpp/generic/generic_stub.h>

#include <cctype>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/recipe/lock_name.h"
#include "tests/bad_input.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

using v1::AcquireEvent;
using Code = grpc::StatusCode;

constexpr milliseconds kHour(3600 * 1000);

void SetDuration(milliseconds d, google::protobuf::Duration* out) {
  // Seconds and nanos carry the same sign, as the Duration spec requires.
  out->set_seconds(d.count() / 1000);
  out->set_nanos(static_cast<int32_t>((d.count() % 1000) * 1000000));
}

int64_t ToMillis(const google::protobuf::Duration& d) {
  return d.seconds() * 1000 + d.nanos() / 1000000;
}

// Whether `number` appears in `s` as a whole number (no digit right before
// or after it), so "3" does not match inside "30" or "13".
bool ContainsNumber(const std::string& s, const std::string& number) {
  for (size_t pos = s.find(number); pos != std::string::npos;
       pos = s.find(number, pos + 1)) {
    bool left = pos == 0 || !std::isdigit(static_cast<unsigned char>(s[pos - 1]));
    size_t end = pos + number.size();
    bool right = end == s.size() || !std::isdigit(static_cast<unsigned char>(s[end]));
    if (left && right) return true;
  }
  return false;
}

// Checks a status against the documented code, field and limit.
void ExpectStatus(const grpc::Status& st, Code code,
                  const std::vector<std::string>& must_contain,
                  const std::string& limit) {
  EXPECT_EQ(st.error_code(), code) << "message: \"" << st.error_message() << "\"";
  for (const auto& s : must_contain) {
    EXPECT_NE(st.error_message().find(s), std::string::npos)
        << "message \"" << st.error_message() << "\" does not contain \"" << s << "\"";
  }
  if (!limit.empty()) {
    EXPECT_TRUE(ContainsNumber(st.error_message(), limit))
        << "message \"" << st.error_message() << "\" does not name the limit " << limit;
  }
}

std::string Repeat(const std::string& s, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

// A well-formed lease id whose node never existed.
std::string UnknownLeaseId(const std::string& lock, uint64_t n) {
  return FormatLeaseId(EncodeLockName(lock),
                       absl::StrFormat("x-%016x-%010d", n, static_cast<int>(n % 1000000)));
}

// A raw Acquire call: writes `requests`, optionally half-closes, then reads
// every event until the server ends the stream (or the 20 s deadline does).
struct RawAcquireResult {
  std::vector<AcquireEvent> events;
  grpc::Status status;
};
RawAcquireResult RawAcquire(v1::LockService::Stub* stub,
                            const std::vector<v1::AcquireRequest>& requests,
                            bool half_close) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto rw = stub->Acquire(&ctx);
  for (const auto& r : requests) rw->Write(r);
  if (half_close) rw->WritesDone();
  RawAcquireResult out;
  AcquireEvent ev;
  while (rw->Read(&ev)) {
    if (ev.type() != AcquireEvent::STILL_HELD) out.events.push_back(ev);  // periodic refresh
  }
  out.status = rw->Finish();
  return out;
}

// One KeepAlive stream: each request is written and its response read before
// the next; stops at the first request that gets no response.
struct KeepAliveResult {
  std::vector<v1::KeepAliveResponse> responses;
  grpc::Status status;
};
KeepAliveResult KeepAliveCall(v1::LockService::Stub* stub,
                              const std::vector<std::vector<std::string>>& requests) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto rw = stub->KeepAlive(&ctx);
  KeepAliveResult out;
  for (const auto& ids : requests) {
    v1::KeepAliveRequest req;
    for (const auto& id : ids) req.add_lease_ids(id);
    if (!rw->Write(req)) break;
    v1::KeepAliveResponse resp;
    if (!rw->Read(&resp)) break;
    out.responses.push_back(resp);
  }
  rw->WritesDone();
  v1::KeepAliveResponse extra;
  while (rw->Read(&extra)) out.responses.push_back(extra);
  out.status = rw->Finish();
  return out;
}

class ValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    zk_connect_ = SharedZkServer().ConnectString();
    root_ = UniqueRoot("val");
    r1_ = StartReplica(TestConfig(zk_connect_, root_));
    ASSERT_TRUE(r1_);
    replicas_.push_back(r1_.get());
    s1_ = NewStub(r1_->address());
    zk_ = std::make_unique<SyncZk>(zk_connect_);
    // Held from the start to the end of every test: bad input must not
    // disturb it.
    sentinel_ = Hold(s1_.get(), "sentinel", &sentinel_lease_);
    ASSERT_FALSE(sentinel_lease_.empty());
  }

  void TearDown() override {
    if (sentinel_) {
      auto ev = sentinel_->Next(milliseconds(0));
      EXPECT_FALSE(ev.has_value()) << "the sentinel holder was told: " << ev->ShortDebugString();
      EXPECT_FALSE(sentinel_->ended()) << "the sentinel's stream ended";
      auto nodes = zk_->Contenders(LockPath("sentinel"));
      ASSERT_EQ(nodes.size(), 1u) << "the sentinel's node is gone";
      EXPECT_EQ(FormatLeaseId(EncodeLockName("sentinel"), nodes[0]), sentinel_lease_);
    }
    for (Replica* r : replicas_) {
      EXPECT_TRUE(r->engine().serving()) << "replica " << r->address();
      EXPECT_TRUE(IsServing(r->address())) << "replica " << r->address();
    }
  }

  std::string LockPath(const std::string& name) {
    return root_ + "/" + EncodeLockName(name);
  }
  bool ContendersBecome(const std::string& name, size_t n,
                        milliseconds timeout = milliseconds(15000)) {
    return WaitFor([&] { return zk_->Contenders(LockPath(name)).size() == n; }, timeout);
  }
  // Validation happens before ZooKeeper: not even the lock's node exists.
  void ExpectLockUntouched(const std::string& name) {
    EXPECT_TRUE(zk_->Contenders(LockPath(name)).empty()) << "a contender node was left behind";
    auto st = zk_->Exists(LockPath(name));
    EXPECT_TRUE(absl::IsNotFound(st.status()))
        << "the lock node " << LockPath(name) << " was created for a rejected request";
  }

  std::unique_ptr<AcquireStream> Hold(v1::LockService::Stub* stub, const std::string& name,
                                      std::string* lease = nullptr) {
    auto s = std::make_unique<AcquireStream>(stub, OpenMsg(name, milliseconds(30000), "holder"));
    auto ev = s->Await(AcquireEvent::ACQUIRED);
    EXPECT_TRUE(ev.has_value()) << "not acquired: " << name;
    if (ev && lease) *lease = ev->acquired().lease_id();
    return s;
  }
  // A waiter: its first event must be QUEUED.
  std::unique_ptr<AcquireStream> Queue(v1::LockService::Stub* stub, const std::string& name) {
    auto s = std::make_unique<AcquireStream>(stub, OpenMsg(name, milliseconds(60000), "waiter"));
    auto ev = s->Next();
    EXPECT_TRUE(ev && ev->type() == AcquireEvent::QUEUED)
        << "waiter on " << name << " got " << (ev ? ev->ShortDebugString() : "nothing");
    return s;
  }
  // Owned by the fixture, so TearDown can still check its health.
  Replica* StartExtraReplica(const ReplicaConfig& config) {
    auto r = StartReplica(config);
    if (!r) return nullptr;
    replicas_.push_back(r.get());
    extra_.push_back(std::move(r));
    return extra_.back().get();
  }
  // Nothing but (possibly) QUEUED events arrived, and the stream is open.
  void ExpectUndisturbed(AcquireStream* s, const std::string& what) {
    while (auto ev = s->Next(milliseconds(0))) {
      EXPECT_EQ(ev->type(), AcquireEvent::QUEUED) << what << " was told " << ev->ShortDebugString();
    }
    EXPECT_FALSE(s->ended()) << what << "'s stream ended";
  }

  grpc::Status Release(v1::LockService::Stub* stub, const std::string& lease_id) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::ReleaseRequest req;
    req.set_lease_id(lease_id);
    v1::ReleaseResponse resp;
    return stub->Release(&ctx, req, &resp);
  }
  grpc::Status Describe(v1::LockService::Stub* stub, const std::string& name,
                        v1::DescribeResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::DescribeRequest req;
    req.set_name(name);
    return stub->Describe(&ctx, req, resp);
  }
  grpc::Status List(v1::LockService::Stub* stub, const std::string& prefix, int limit,
                    v1::ListResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::ListRequest req;
    req.set_prefix(prefix);
    req.set_limit(limit);
    return stub->List(&ctx, req, resp);
  }

  std::string zk_connect_, root_;
  std::unique_ptr<Replica> r1_;
  std::vector<std::unique_ptr<Replica>> extra_;
  std::vector<Replica*> replicas_;  // checked for health in TearDown
  std::unique_ptr<v1::LockService::Stub> s1_;
  std::unique_ptr<SyncZk> zk_;
  std::unique_ptr<AcquireStream> sentinel_;
  std::string sentinel_lease_;
};

// ---------------------------------------------------------------------------
// 1. Every limit of AcquireOpen, at and past its boundary.

struct OpenRow {
  std::string what;
  // Applied to a valid open (free lock "row-<i>", wait_timeout 5s).
  std::function<void(v1::AcquireOpen&)> mutate;
  Code code;                              // OK: ACQUIRED arrives
  std::vector<std::string> must_contain;  // errors: field name etc.
  std::string limit;                      // errors: the limit, as a whole number
  bool name_valid = true;                 // false: no lock path to inspect
};

std::function<void(v1::AcquireOpen&)> Name(std::string name) {
  return [name](v1::AcquireOpen& o) { o.set_name(name); };
}
std::function<void(v1::AcquireOpen&)> Owner(size_t bytes) {
  return [bytes](v1::AcquireOpen& o) { o.set_owner(std::string(bytes, 'o')); };
}
std::function<void(v1::AcquireOpen&)> Entries(size_t n) {
  return [n](v1::AcquireOpen& o) {
    for (size_t i = 0; i < n; ++i) (*o.mutable_metadata())[absl::StrFormat("k%02d", i)] = "v";
  };
}
std::function<void(v1::AcquireOpen&)> Entry(std::string key, std::string value) {
  return [key, value](v1::AcquireOpen& o) { (*o.mutable_metadata())[key] = value; };
}
std::function<void(v1::AcquireOpen&)> WaitTimeout(milliseconds d) {
  return [d](v1::AcquireOpen& o) { SetDuration(d, o.mutable_wait_timeout()); };
}
std::function<void(v1::AcquireOpen&)> Ttl(milliseconds d) {
  return [d](v1::AcquireOpen& o) { SetDuration(d, o.mutable_ttl()); };
}
std::function<void(v1::AcquireOpen&)> Kind(int k) {
  return [k](v1::AcquireOpen& o) { o.set_kind(static_cast<v1::LockKind>(k)); };
}

std::vector<OpenRow> OpenRows() {
  const Code kOk = Code::OK, kBad = Code::INVALID_ARGUMENT;
  const std::string kCyr = "\xD0\xBA";  // "к": 2 bytes
  return {
      {"baseline: a valid open", [](v1::AcquireOpen&) {}, kOk, {}, ""},
      // name: 1..256 bytes of UTF-8 without control characters.
      {"name empty", Name(""), kBad, {"name"}, "256", false},
      {"name 1 byte", Name("1"), kOk, {}, ""},
      {"name 256 bytes", Name(std::string(256, 'n')), kOk, {}, ""},
      {"name 257 bytes", Name(std::string(257, 'n')), kBad, {"name"}, "256", false},
      {"name 256 bytes of 2-byte chars", Name(Repeat(kCyr, 128)), kOk, {}, ""},
      {"name 258 bytes of 2-byte chars", Name(Repeat(kCyr, 129)), kBad, {"name"}, "256", false},
      {"name contains U+0001", Name("ctl\x01name"), kBad, {"name", "U+0001"}, "", false},
      {"name contains U+001F", Name("ctl\x1Fname"), kBad, {"name", "U+001F"}, "", false},
      {"name contains U+0020 (space)", Name("sp ace"), kOk, {}, ""},
      {"name contains U+007E (~)", Name("til~de"), kOk, {}, ""},
      {"name contains U+007F (DEL)", Name("del\x7Fname"), kBad, {"name", "U+007F"}, "", false},
      {"name contains U+0085 (NEL)", Name("nel\xC2\x85name"), kBad, {"name", "U+0085"}, "", false},
      {"name contains U+009F", Name("c1\xC2\x9Fname"), kBad, {"name", "U+009F"}, "", false},
      {"name contains U+00A0 (NBSP)", Name("nb\xC2\xA0sp"), kOk, {}, ""},
      {"name \"/\" (escaped)", Name("/"), kOk, {}, ""},
      {"name \".\" (escaped)", Name("."), kOk, {}, ""},
      {"name \"..\" (escaped)", Name(".."), kOk, {}, ""},
      {"name \"...\" (escaped)", Name("..."), kOk, {}, ""},
      {"name \"zookeeper\"", Name("zookeeper"), kOk, {}, ""},
      {"name \"a/b\" (escaped)", Name("a/b"), kOk, {}, ""},
      {"name \"%2F\" (the escape char itself)", Name("%2F"), kOk, {}, ""},
      {"name \"ключ\" (escaped)", Name("\xD0\xBA\xD0\xBB\xD1\x8E\xD1\x87"), kOk, {}, ""},
      // owner: 0..128 bytes.
      {"owner 128 bytes", Owner(128), kOk, {}, ""},
      {"owner 129 bytes", Owner(129), kBad, {"owner"}, "128"},
      // metadata: at most 16 entries; keys 1..64 bytes; values 0..256 bytes.
      {"metadata 16 entries", Entries(16), kOk, {}, ""},
      {"metadata 17 entries", Entries(17), kBad, {"metadata"}, "16"},
      {"metadata key 64 bytes", Entry(std::string(64, 'k'), "v"), kOk, {}, ""},
      {"metadata key 65 bytes", Entry(std::string(65, 'k'), "v"), kBad, {"metadata", "key"}, "64"},
      {"metadata key empty", Entry("", "v"), kBad, {"metadata", "key"}, "64"},
      {"metadata value empty", Entry("k", ""), kOk, {}, ""},
      {"metadata value 256 bytes", Entry("k", std::string(256, 'v')), kOk, {}, ""},
      {"metadata value 257 bytes", Entry("k", std::string(257, 'v')), kBad, {"metadata", "value"}, "256"},
      // wait_timeout: 0..1h. Durations as flags write them; the limit in ms
      // too, in brackets (what client libraries read, protos/README.md).
      {"wait_timeout -1s", WaitTimeout(milliseconds(-1000)), kBad,
       {"wait_timeout is -1s; it must be 0..1h (--max-wait-timeout)"}, "3600000"},
      {"wait_timeout -1ms", WaitTimeout(milliseconds(-1)), kBad, {"wait_timeout is -1ms;", "0..1h"},
       "3600000"},
      {"wait_timeout 0 (try once, free lock)", WaitTimeout(milliseconds(0)), kOk, {}, ""},
      {"wait_timeout 3600s", WaitTimeout(kHour), kOk, {}, ""},
      {"wait_timeout 3600s+1ms", WaitTimeout(kHour + milliseconds(1)), kBad,
       {"wait_timeout is 1h1ms; it must be 0..1h (--max-wait-timeout) "
        "[wait_timeout is 3600001ms; it must be 0..3600000ms]"}, "3600000"},
      // ttl: 0 or 500ms..1h.
      {"ttl -1s", Ttl(milliseconds(-1000)), kBad, {"ttl is -1s; it must be 0 or 500ms..1h"}, ""},
      {"ttl 1ms", Ttl(milliseconds(1)), kBad, {"ttl is 1ms;", "500ms..1h"}, ""},
      {"ttl 499ms", Ttl(milliseconds(499)), kBad, {"ttl is 499ms;", "500ms..1h"}, ""},
      {"ttl 500ms", Ttl(milliseconds(500)), kOk, {}, ""},
      {"ttl 3600s", Ttl(kHour), kOk, {}, ""},
      {"ttl 3600s+1ms", Ttl(kHour + milliseconds(1)), kBad,
       {"ttl is 1h1ms; it must be 0 or 500ms..1h (--max-ttl)"}, ""},
      // kind: EXCLUSIVE, SHARED (or unspecified, = EXCLUSIVE); nothing else.
      {"kind LOCK_KIND_EXCLUSIVE", Kind(v1::LOCK_KIND_EXCLUSIVE), kOk, {}, ""},
      {"kind LOCK_KIND_SHARED", Kind(v1::LOCK_KIND_SHARED), kOk, {}, ""},
      {"kind value 7", Kind(7), kBad, {"kind", "7"}, ""},
      // lock_delay: 0..60s.
      {"lock_delay -1ms", [](v1::AcquireOpen& o) { SetDuration(milliseconds(-1), o.mutable_lock_delay()); },
       kBad, {"lock_delay is -1ms; it must be 0..1m"}, ""},
      {"lock_delay 60s", [](v1::AcquireOpen& o) { SetDuration(milliseconds(60000), o.mutable_lock_delay()); },
       kOk, {}, ""},
      {"lock_delay 60s+1ms",
       [](v1::AcquireOpen& o) { SetDuration(milliseconds(60001), o.mutable_lock_delay()); },
       kBad, {"lock_delay is 1m1ms; it must be 0..1m"}, ""},
      // revoke_reason: 0..256 bytes.
      {"revoke_reason 256 bytes",
       [](v1::AcquireOpen& o) { o.set_revoke_holders(true); o.set_revoke_reason(std::string(256, 'r')); },
       kOk, {}, ""},
      {"revoke_reason 257 bytes",
       [](v1::AcquireOpen& o) { o.set_revoke_holders(true); o.set_revoke_reason(std::string(257, 'r')); },
       kBad, {"revoke_reason"}, "256"},
  };
}

TEST_F(ValidationTest, AcquireOpenLimitsAtAndPastEachBoundary) {
  std::vector<OpenRow> rows = OpenRows();
  std::vector<std::string> names;
  for (size_t i = 0; i < rows.size(); ++i) {
    const OpenRow& row = rows[i];
    SCOPED_TRACE(absl::StrCat("row ", i, ": ", row.what));
    v1::AcquireOpen open = OpenMsg(absl::StrCat("row-", i), milliseconds(5000), "validation");
    row.mutate(open);
    const std::string name = open.name();
    if (row.name_valid) {
      // Every row needs a free lock of its own.
      for (const auto& n : names) ASSERT_NE(n, name) << "lock name reused";
      names.push_back(name);
      ASSERT_TRUE(zk_->Contenders(LockPath(name)).empty());
    }

    AcquireStream s(s1_.get(), open);
    if (row.code == Code::OK) {
      auto acq = s.Await(AcquireEvent::ACQUIRED, milliseconds(20000));
      ASSERT_TRUE(acq.has_value())
          << "not acquired; stream status: "
          << (s.ended() ? s.AwaitEnd()->error_message() : std::string("still open"));
      // The name was escaped into one segment, never altered.
      auto nodes = zk_->Contenders(LockPath(name));
      ASSERT_EQ(nodes.size(), 1u);
      EXPECT_EQ(acq->acquired().lease_id(), FormatLeaseId(EncodeLockName(name), nodes[0]));
      EXPECT_EQ(ToMillis(acq->acquired().valid_for()), ToMillis(open.ttl()));
      v1::ListResponse listed;
      ASSERT_TRUE(List(s1_.get(), name, 0, &listed).ok());
      EXPECT_EQ(std::vector<std::string>(listed.names().begin(), listed.names().end()),
                std::vector<std::string>{name});

      s.SendRelease();
      auto end = s.Next();
      ASSERT_TRUE(end.has_value()) << "no event after release";
      if (end->type() == AcquireEvent::LOST && ToMillis(open.ttl()) > 0) {
        // A 500 ms lease may lapse on a slow machine before the release.
        EXPECT_EQ(end->lost().reason(), v1::Lost::LEASE_EXPIRED);
      } else {
        EXPECT_EQ(end->type(), AcquireEvent::RELEASED) << end->ShortDebugString();
      }
      auto st = s.AwaitEnd();
      ASSERT_TRUE(st.has_value());
      EXPECT_TRUE(st->ok()) << st->error_code() << " " << st->error_message();
      EXPECT_TRUE(ContendersBecome(name, 0));
    } else {
      auto st = s.AwaitEnd();
      ASSERT_TRUE(st.has_value()) << "the stream did not end";
      ExpectStatus(*st, row.code, row.must_contain, row.limit);
      while (auto ev = s.Next(milliseconds(0))) {
        ADD_FAILURE() << "a rejected open sent an event: " << ev->ShortDebugString();
      }
      if (row.name_valid) ExpectLockUntouched(name);
    }
  }
}

// ---------------------------------------------------------------------------
// 2. Stream protocol: messages out of order.

TEST_F(ValidationTest, AcquireStreamProtocolErrors) {
  {
    SCOPED_TRACE("first message is release");
    v1::AcquireRequest release;
    release.mutable_release();
    RawAcquireResult r = RawAcquire(s1_.get(), {release}, /*half_close=*/false);
    ExpectStatus(r.status, Code::FAILED_PRECONDITION, {"open"}, "");
    EXPECT_TRUE(r.events.empty());
  }
  {
    SCOPED_TRACE("half-closed without any message");
    RawAcquireResult r = RawAcquire(s1_.get(), {}, /*half_close=*/true);
    ExpectStatus(r.status, Code::FAILED_PRECONDITION, {"open"}, "");
    EXPECT_TRUE(r.events.empty());
  }
  {
    SCOPED_TRACE("open sent twice: the contender is released, no node left");
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto rw = s1_->Acquire(&ctx);
    v1::AcquireRequest open;
    *open.mutable_open() = OpenMsg("twice", milliseconds(5000));
    ASSERT_TRUE(rw->Write(open));
    AcquireEvent ev;
    ASSERT_TRUE(rw->Read(&ev));
    ASSERT_EQ(ev.type(), AcquireEvent::ACQUIRED) << ev.ShortDebugString();
    EXPECT_EQ(zk_->Contenders(LockPath("twice")).size(), 1u);
    rw->Write(open);
    std::vector<AcquireEvent> after;
    while (rw->Read(&ev)) after.push_back(ev);
    grpc::Status st = rw->Finish();
    ExpectStatus(st, Code::FAILED_PRECONDITION, {"open"}, "");
    for (const auto& e : after) {
      EXPECT_NE(e.type(), AcquireEvent::ACQUIRED) << e.ShortDebugString();
    }
    EXPECT_TRUE(ContendersBecome("twice", 0));
  }
}

// ---------------------------------------------------------------------------
// 3. Release and Revoke.

// Revoke (issue 12): lease id as for Release; requester 0..128 bytes,
// reason 0..256 bytes, each checked before ZooKeeper is asked.
TEST_F(ValidationTest, RevokeArguments) {
  const std::string unknown = FormatLeaseId(EncodeLockName("nope"), "x-00000000deadbeef-0000000001");
  struct Row {
    std::string what, lease_id, requester, reason;
    Code code;
    std::vector<std::string> must_contain;
    std::string limit;
  };
  std::vector<Row> rows = {
      {"malformed lease id", "garbage", "", "", Code::INVALID_ARGUMENT, {"lease_id"}, ""},
      {"requester 128 bytes", unknown, std::string(128, 'q'), "", Code::NOT_FOUND, {"lease_id"}, ""},
      {"requester 129 bytes", unknown, std::string(129, 'q'), "", Code::INVALID_ARGUMENT,
       {"requester"}, "128"},
      {"reason 256 bytes", unknown, "", std::string(256, 'r'), Code::NOT_FOUND, {"lease_id"}, ""},
      {"reason 257 bytes", unknown, "", std::string(257, 'r'), Code::INVALID_ARGUMENT, {"reason"},
       "256"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.what);
    grpc::ClientContext ctx;
    v1::RevokeRequest req;
    req.set_lease_id(row.lease_id);
    req.set_requester(row.requester);
    req.set_reason(row.reason);
    v1::RevokeResponse resp;
    ExpectStatus(s1_->Revoke(&ctx, req, &resp), row.code, row.must_contain, row.limit);
  }
}

TEST_F(ValidationTest, ReleaseRejectsMalformedAndUnknownLeaseIds) {
  struct Row {
    std::string what;
    std::string lease_id;
    Code code;
    std::vector<std::string> must_contain;
    std::string limit;
  };
  // The longest lease id the server can issue: a 256-byte name escaped to
  // 768 bytes, a '/', and a contender node with an 11-char sequence.
  std::string longest_seq11 = FormatLeaseId(EncodeLockName(std::string(256, '/')),
                                            "x-00000000deadbeef--2147483648");
  std::vector<Row> rows = {
      {"empty", "", Code::INVALID_ARGUMENT, {"lease_id"}, "1024"},
      {"garbage", "garbage", Code::INVALID_ARGUMENT, {"lease_id"}, ""},
      {"no contender node", EncodeLockName("nope") + "/", Code::INVALID_ARGUMENT, {"lease_id"}, ""},
      {"1024 bytes, not well-formed", std::string(1024, 'g'), Code::INVALID_ARGUMENT, {"lease_id"}, ""},
      {"1025 bytes", std::string(1025, 'g'), Code::INVALID_ARGUMENT, {"lease_id"}, "1024"},
      {"well-formed, never existed",
       FormatLeaseId(EncodeLockName("nope"), "x-00000000deadbeef-0000000001"),
       Code::NOT_FOUND, {"lease_id"}, ""},
      {"well-formed, longest possible, never existed", longest_seq11, Code::NOT_FOUND,
       {"lease_id"}, ""},
  };
  ASSERT_EQ(longest_seq11.size(), 768u + 1 + 30);
  for (const Row& row : rows) {
    SCOPED_TRACE(row.what);
    grpc::Status st = Release(s1_.get(), row.lease_id);
    ExpectStatus(st, row.code, row.must_contain, row.limit);
    if (row.what == "1024 bytes, not well-formed") {
      // At the length limit it is judged by its form, not its length.
      EXPECT_EQ(st.error_message().find("exceeds"), std::string::npos) << st.error_message();
    }
  }
  EXPECT_TRUE(ContendersBecome("nope", 0));
}

// ---------------------------------------------------------------------------
// 4. KeepAlive.

TEST_F(ValidationTest, KeepAliveLeaseCountAndPerLeaseCodes) {
  {
    SCOPED_TRACE("0 lease ids");
    KeepAliveResult r = KeepAliveCall(s1_.get(), {{}});
    ExpectStatus(r.status, Code::INVALID_ARGUMENT, {"lease_ids"}, "100");
    EXPECT_TRUE(r.responses.empty());
  }
  std::vector<std::string> ids;
  for (uint64_t i = 0; i < 101; ++i) ids.push_back(UnknownLeaseId("nope", 0xdead0000 + i));
  {
    SCOPED_TRACE("101 lease ids");
    KeepAliveResult r = KeepAliveCall(s1_.get(), {ids});
    ExpectStatus(r.status, Code::INVALID_ARGUMENT, {"lease_ids"}, "100");
    EXPECT_TRUE(r.responses.empty());
  }
  ids.pop_back();
  {
    SCOPED_TRACE("100 unknown lease ids");
    KeepAliveResult r = KeepAliveCall(s1_.get(), {ids});
    EXPECT_TRUE(r.status.ok()) << r.status.error_code() << " " << r.status.error_message();
    ASSERT_EQ(r.responses.size(), 1u);
    ASSERT_EQ(r.responses[0].leases_size(), 100);
    for (int i = 0; i < 100; ++i) {
      const auto& l = r.responses[0].leases(i);
      EXPECT_EQ(l.lease_id(), ids[static_cast<size_t>(i)]) << "lease " << i << " out of order";
      EXPECT_EQ(l.code(), static_cast<int>(Code::NOT_FOUND)) << "lease " << i << ": " << l.message();
      EXPECT_NE(l.message().find("lease_id"), std::string::npos) << l.message();
      EXPECT_EQ(ToMillis(l.valid_for()), 0);
    }
  }
  {
    SCOPED_TRACE("malformed, held and unknown ids in one request; the stream goes on");
    std::vector<std::string> mixed = {"garbage", sentinel_lease_, UnknownLeaseId("nope", 7),
                                      std::string(1025, 'g')};
    KeepAliveResult r = KeepAliveCall(s1_.get(), {mixed, {sentinel_lease_}});
    EXPECT_TRUE(r.status.ok()) << r.status.error_code() << " " << r.status.error_message();
    ASSERT_EQ(r.responses.size(), 2u);
    ASSERT_EQ(r.responses[0].leases_size(), 4);
    const auto& l = r.responses[0].leases();
    EXPECT_EQ(l[0].lease_id(), "garbage");
    EXPECT_EQ(l[0].code(), static_cast<int>(Code::INVALID_ARGUMENT)) << l[0].message();
    EXPECT_NE(l[0].message().find("lease_id"), std::string::npos) << l[0].message();
    EXPECT_EQ(l[1].code(), static_cast<int>(Code::OK)) << l[1].message();
    EXPECT_EQ(l[2].code(), static_cast<int>(Code::NOT_FOUND)) << l[2].message();
    EXPECT_EQ(l[3].code(), static_cast<int>(Code::INVALID_ARGUMENT)) << l[3].message();
    EXPECT_TRUE(ContainsNumber(l[3].message(), "1024")) << l[3].message();
    ASSERT_EQ(r.responses[1].leases_size(), 1);
    EXPECT_EQ(r.responses[1].leases(0).code(), static_cast<int>(Code::OK));
  }
}

// ---------------------------------------------------------------------------
// 5. Describe and List.

TEST_F(ValidationTest, DescribeAndListArguments) {
  v1::DescribeResponse d;
  ExpectStatus(Describe(s1_.get(), "", &d), Code::INVALID_ARGUMENT, {"name"}, "256");
  ExpectStatus(Describe(s1_.get(), std::string(257, 'n'), &d), Code::INVALID_ARGUMENT,
               {"name"}, "256");
  ExpectStatus(Describe(s1_.get(), "ctl\x01", &d), Code::INVALID_ARGUMENT, {"name"}, "");
  ExpectStatus(Describe(s1_.get(), "unknown-lock", &d), Code::NOT_FOUND, {"unknown-lock"}, "");
  EXPECT_TRUE(Describe(s1_.get(), "sentinel", &d).ok());
  EXPECT_EQ(d.holders_size(), 1);

  struct Row {
    std::string what;
    std::string prefix;
    int limit;
    Code code;
    std::vector<std::string> must_contain;
    std::string limit_in_message;
  };
  std::vector<Row> rows = {
      {"limit -1", "", -1, Code::INVALID_ARGUMENT, {"limit"}, "10000"},
      {"limit 0 (default)", "", 0, Code::OK, {}, ""},
      {"limit 1", "", 1, Code::OK, {}, ""},
      {"limit 10000", "", 10000, Code::OK, {}, ""},
      {"limit 10001", "", 10001, Code::INVALID_ARGUMENT, {"limit"}, "10000"},
      {"prefix 256 bytes", std::string(256, 'p'), 0, Code::OK, {}, ""},
      {"prefix 257 bytes", std::string(257, 'p'), 0, Code::INVALID_ARGUMENT, {"prefix"}, "256"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.what);
    v1::ListResponse resp;
    grpc::Status st = List(s1_.get(), row.prefix, row.limit, &resp);
    ExpectStatus(st, row.code, row.must_contain, row.limit_in_message);
    if (row.code == Code::OK && row.prefix.empty()) {
      EXPECT_EQ(std::vector<std::string>(resp.names().begin(), resp.names().end()),
                std::vector<std::string>{"sentinel"});
      EXPECT_FALSE(resp.truncated());
    }
  }
}

// Every RPC, each with input that is bad whoever sends it (tests/bad_input.h;
// authz_test runs the same calls as identities a policy denies everything).
TEST_F(ValidationTest, EveryRpcAnswersBadInputWithInvalidArgument) {
  const std::vector<BadInputCall> calls = BadInputCalls("bad-input");
  std::set<std::string> covered;
  for (const BadInputCall& c : calls) covered.insert(c.rpc);
  const std::vector<std::string> methods = LockServiceMethods();
  ASSERT_FALSE(methods.empty());
  for (const std::string& m : methods) EXPECT_EQ(covered.count(m), 1u) << m << " has no row";
  for (const BadInputCall& c : calls) {
    SCOPED_TRACE(c.rpc + ": " + c.what);
    grpc::Status st = c.call(s1_.get());
    EXPECT_EQ(st.error_code(), Code::INVALID_ARGUMENT) << st.error_message();
  }
  ExpectLockUntouched("bad-input");
}

// ---------------------------------------------------------------------------
// 6. Too many contenders on one lock: local check, then cluster-wide.

TEST_F(ValidationTest, TooManyContendersOnOneLock) {
  ReplicaConfig config = TestConfig(zk_connect_, root_);
  config.max_contenders_per_lock = 3;
  Replica* ra = StartExtraReplica(config);
  Replica* rb = StartExtraReplica(config);
  ASSERT_TRUE(ra && rb);
  auto sa = NewStub(ra->address());
  auto sb = NewStub(rb->address());

  // At the limit: a holder and two waiters.
  auto holder = Hold(sa.get(), "crowd");
  auto w1 = Queue(sa.get(), "crowd");
  auto w2 = Queue(sa.get(), "crowd");
  ASSERT_TRUE(ContendersBecome("crowd", 3));

  {
    SCOPED_TRACE("4th contender on the same replica (local check)");
    AcquireStream fourth(sa.get(), OpenMsg("crowd", milliseconds(5000)));
    auto st = fourth.AwaitEnd();
    ASSERT_TRUE(st.has_value());
    ExpectStatus(*st, Code::RESOURCE_EXHAUSTED, {"crowd", "contenders"}, "3");
    EXPECT_FALSE(fourth.Next(milliseconds(0)).has_value());
    EXPECT_EQ(zk_->Contenders(LockPath("crowd")).size(), 3u);
  }
  {
    SCOPED_TRACE("4th contender through a second replica (cluster-wide check)");
    AcquireStream fourth(sb.get(), OpenMsg("crowd", milliseconds(5000)));
    auto st = fourth.AwaitEnd();
    ASSERT_TRUE(st.has_value());
    ExpectStatus(*st, Code::RESOURCE_EXHAUSTED, {"crowd", "contenders"}, "3");
    while (auto ev = fourth.Next(milliseconds(0))) {
      ADD_FAILURE() << "a refused contender was sent " << ev->ShortDebugString();
    }
    EXPECT_TRUE(ContendersBecome("crowd", 3)) << "the refused contender's node was left behind";
  }
  {
    SCOPED_TRACE("try-once past the limit through the second replica");
    AcquireStream once(sb.get(), OpenMsg("crowd", milliseconds(0)));
    auto st = once.AwaitEnd();
    ASSERT_TRUE(st.has_value());
    ExpectStatus(*st, Code::RESOURCE_EXHAUSTED, {"crowd"}, "3");
    EXPECT_TRUE(ContendersBecome("crowd", 3));
  }
  ExpectUndisturbed(holder.get(), "the holder");
  ExpectUndisturbed(w1.get(), "waiter 1");
  ExpectUndisturbed(w2.get(), "waiter 2");

  // A waiter leaves: one more contender fits, through either replica.
  w2->Cancel();
  ASSERT_TRUE(w2->AwaitEnd().has_value());
  ASSERT_TRUE(ContendersBecome("crowd", 2));
  auto w3 = Queue(sb.get(), "crowd");
  ASSERT_TRUE(ContendersBecome("crowd", 3));
  {
    SCOPED_TRACE("full again: refused again through the second replica");
    AcquireStream fourth(sb.get(), OpenMsg("crowd", milliseconds(5000)));
    auto st = fourth.AwaitEnd();
    ASSERT_TRUE(st.has_value());
    ExpectStatus(*st, Code::RESOURCE_EXHAUSTED, {"crowd"}, "3");
    EXPECT_TRUE(ContendersBecome("crowd", 3));
  }
  ExpectUndisturbed(holder.get(), "the holder");
  ExpectUndisturbed(w1.get(), "waiter 1");
  ExpectUndisturbed(w3.get(), "waiter 3");

  // The queue still works: the holder releases, waiter 1 then waiter 3 get it.
  holder->SendRelease();
  ASSERT_TRUE(holder->Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(w1->Await(AcquireEvent::ACQUIRED));
  w1->SendRelease();
  ASSERT_TRUE(w1->Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(w3->Await(AcquireEvent::ACQUIRED));
  // Other locks are not limited by this one.
  auto elsewhere = Hold(sa.get(), "not-crowded");
}

// ---------------------------------------------------------------------------
// 7. Too many streams on one replica.

TEST_F(ValidationTest, TooManyStreamsOnOneReplica) {
  ReplicaConfig config = TestConfig(zk_connect_, root_);
  config.max_streams = 2;
  Replica* rs = StartExtraReplica(config);
  ASSERT_TRUE(rs);
  auto ss = NewStub(rs->address());

  // At the limit: a holder and a waiter.
  auto holder = Hold(ss.get(), "busy");
  auto waiter = Queue(ss.get(), "busy");

  {
    SCOPED_TRACE("3rd Acquire stream");
    AcquireStream third(ss.get(), OpenMsg("spare", milliseconds(5000)));
    auto st = third.AwaitEnd();
    ASSERT_TRUE(st.has_value());
    ExpectStatus(*st, Code::RESOURCE_EXHAUSTED, {"streams"}, "2");
    EXPECT_FALSE(third.Next(milliseconds(0)).has_value());
    ExpectLockUntouched("spare");
  }
  {
    SCOPED_TRACE("a KeepAlive stream counts too");
    KeepAliveResult r = KeepAliveCall(ss.get(), {{sentinel_lease_}});
    ExpectStatus(r.status, Code::RESOURCE_EXHAUSTED, {"streams"}, "2");
    EXPECT_TRUE(r.responses.empty());
  }
  // Unary calls are not streams: still served while the streams are full.
  v1::DescribeResponse d;
  grpc::Status st = Describe(ss.get(), "busy", &d);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(d.holders_size(), 1);
  EXPECT_EQ(d.waiters_size(), 1);
  EXPECT_TRUE(IsServing(rs->address()));
  ExpectUndisturbed(holder.get(), "the holder");
  ExpectUndisturbed(waiter.get(), "the waiter");

  // Closing one frees its slot. The slot is returned when the server is
  // done with the stream, which may be just after the client saw it end, so
  // retry (against a deadline) until one new stream is admitted.
  waiter->Cancel();
  ASSERT_TRUE(waiter->AwaitEnd().has_value());
  ASSERT_TRUE(ContendersBecome("busy", 1));
  std::unique_ptr<AcquireStream> fresh;
  int attempts = 0;
  std::string last_refusal;
  bool admitted = WaitFor(
      [&] {
        ++attempts;
        fresh = std::make_unique<AcquireStream>(ss.get(), OpenMsg("spare", milliseconds(5000)));
        if (fresh->Await(AcquireEvent::ACQUIRED, milliseconds(10000))) return true;
        auto end = fresh->AwaitEnd(milliseconds(0));
        last_refusal = end ? end->error_message() : "no end";
        return false;
      },
      milliseconds(10000), milliseconds(50));
  ASSERT_TRUE(admitted) << "no new stream admitted after one closed; last: " << last_refusal;
  if (attempts > 1) {
    std::cout << "[ note ] the freed stream slot was reused after " << attempts
              << " attempts (first refused: " << last_refusal << ")\n";
  }
  {
    SCOPED_TRACE("full again");
    AcquireStream third(ss.get(), OpenMsg("spare-2", milliseconds(5000)));
    auto end = third.AwaitEnd();
    ASSERT_TRUE(end.has_value());
    EXPECT_EQ(end->error_code(), Code::RESOURCE_EXHAUSTED) << end->error_message();
    ExpectLockUntouched("spare-2");
  }
  ExpectUndisturbed(holder.get(), "the holder");
  ExpectUndisturbed(fresh.get(), "the new stream");
  EXPECT_EQ(zk_->Contenders(LockPath("busy")).size(), 1u);
  EXPECT_EQ(zk_->Contenders(LockPath("spare")).size(), 1u);
}

// ---------------------------------------------------------------------------
// 8. The per-replica budget of watched path bytes (SPEC §8: all watches are
// re-sent in one SetWatches packet on reconnect, bounded by jute.maxbuffer).

TEST_F(ValidationTest, WatchedPathBudgetOnOneReplica) {
  ReplicaConfig config = TestConfig(zk_connect_, root_);
  // Room for exactly two contenders on the lock "w" (root + "/w" + 40).
  const int64_t per_contender = static_cast<int64_t>(root_.size() + 1 + 40);
  config.max_watch_bytes = 2 * per_contender;
  Replica* rw = StartExtraReplica(config);
  ASSERT_TRUE(rw);
  auto sw = NewStub(rw->address());
  auto holder = Hold(sw.get(), "w");
  auto waiter = Queue(sw.get(), "w");
  {
    SCOPED_TRACE("a third contender exceeds the budget");
    AcquireStream third(sw.get(), OpenMsg("w", milliseconds(5000)));
    auto st = third.AwaitEnd();
    ASSERT_TRUE(st.has_value());
    ExpectStatus(*st, Code::RESOURCE_EXHAUSTED, {"bytes"}, std::to_string(2 * per_contender));
    EXPECT_EQ(zk_->Contenders(LockPath("w")).size(), 2u);
  }
  ExpectUndisturbed(holder.get(), "the holder");
  // A contender that ends returns its bytes.
  waiter->Cancel();
  ASSERT_TRUE(waiter->AwaitEnd().has_value());
  ASSERT_TRUE(ContendersBecome("w", 1));
  EXPECT_TRUE(WaitFor([&] { return rw->engine().stats().contenders == 1; }, milliseconds(5000)));
  AcquireStream again(sw.get(), OpenMsg("w", milliseconds(5000)));
  auto q = again.Next();
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->type(), AcquireEvent::QUEUED);
  EXPECT_TRUE(IsServing(rw->address()));
}

}  // namespace
}  // namespace turnstile::testing
