// LockEngine: routes each call to the shard that owns its lock, contender
// or lease (engine_shard.h), and gathers what the pool reports as a whole.
#include "server/engine/lock_engine.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/engine/engine_shard.h"

namespace turnstile {

const char* LostReasonName(LostReason r) {
  switch (r) {
    case LostReason::kSessionExpired: return "session_expired";
    case LostReason::kLeaseExpired: return "lease_expired";
    case LostReason::kDeleted: return "deleted";
    case LostReason::kShutdown: return "shutdown";
  }
  return "?";
}

const char* AcquireResultName(AcquireResult r) {
  switch (r) {
    case AcquireResult::kAcquired: return "acquired";
    case AcquireResult::kTimeout: return "timeout";
    case AcquireResult::kBusy: return "busy";
    case AcquireResult::kCancelled: return "cancelled";
    case AcquireResult::kFailed: return "failed";
    case AcquireResult::kCount: break;
  }
  return "?";
}

LockEngine::LockEngine(std::vector<ZkSession*> sessions, EngineOptions options)
    : options_(std::move(options)), sessions_(std::move(sessions)) {
  for (size_t i = 0; i < sessions_.size(); ++i) loops_.push_back(sessions_[i]->loop());
  shard_serving_.assign(sessions_.size(), false);
  for (size_t i = 0; i < sessions_.size(); ++i) {
    shards_.push_back(std::make_unique<EngineShard>(sessions_[i], i, sessions_.size(), &next_id_,
                                                    loops_[i], options_));
  }
  for (size_t i = 0; i < shards_.size(); ++i) {
    // From shard i's loop, in the order of its changes: the pool's state
    // lives on the first shard's loop, where the changes of every shard
    // are applied one at a time, in the order they arrive.
    shards_[i]->SetServingListener([this, i](bool serving) {
      loops_[0]->Run([this, i, serving] { OnShardServing(i, serving); });
    });
  }
}

void LockEngine::OnShardServing(size_t index, bool serving) {
  shard_serving_[index] = serving;
  const bool now = std::all_of(shard_serving_.begin(), shard_serving_.end(),
                               [](bool s) { return s; });
  if (now == last_serving_) return;
  last_serving_ = now;
  if (serving_listener_) serving_listener_(now);
}

// Each shard is destroyed on its loop if that still runs (EngineShard's
// destructor), so nothing of it runs after; then the serving reports they
// posted to the first shard's loop have run before the engine goes.
LockEngine::~LockEngine() {
  shards_.clear();
  loops_[0]->RunAndWait([] {});
}

bool LockEngine::AwaitLoops(std::chrono::milliseconds timeout) const {
  auto left = std::make_shared<std::atomic<size_t>>(loops_.size());
  auto done = std::make_shared<absl::Notification>();
  for (EventLoop* loop : loops_) {
    loop->Post([left, done] {
      if (left->fetch_sub(1) == 1) done->Notify();
    });
  }
  return done->WaitForNotificationWithTimeout(absl::FromChrono(timeout));
}

size_t LockEngine::pending_timers() const {
  size_t n = 0;
  for (EventLoop* loop : loops_) n += loop->timers();
  return n;
}

void LockEngine::Quiesce() {
  for (auto& shard : shards_) shard->Quiesce();
  // No shard reports any more; those already posted run first.
  loops_[0]->RunAndWait([this] { serving_listener_ = nullptr; });
}

EngineShard& LockEngine::ShardOfSegment(const std::string& segment) const {
  return *shards_[SessionIndexFor(segment, shards_.size())];
}

EngineShard& LockEngine::ShardOfLease(const std::string& lease_id) const {
  absl::StatusOr<LeaseId> lease = ParseLeaseId(lease_id);
  // A malformed id goes to the first shard, which says what is wrong.
  return lease.ok() ? ShardOfSegment(lease->lock_segment) : *shards_[0];
}

size_t LockEngine::SessionIndexOf(const std::string& name) const {
  return SessionIndexFor(EncodeLockName(name), sessions_.size());
}

absl::StatusOr<uint64_t> LockEngine::Open(const AcquireParams& params,
                                          std::shared_ptr<ContenderSink> sink) {
  return ShardOfSegment(EncodeLockName(params.name)).Open(params, std::move(sink));
}

void LockEngine::Release(uint64_t id) { ShardOfId(id).Release(id); }
void LockEngine::HalfClose(uint64_t id) { ShardOfId(id).HalfClose(id); }
void LockEngine::Abandon(uint64_t id) { ShardOfId(id).Abandon(id); }

void LockEngine::ReleaseLease(
    const std::string& lease_id,
    std::function<void(absl::Status, const std::string& holder_identity)> done) {
  ShardOfLease(lease_id).ReleaseLease(lease_id, std::move(done));
}

void LockEngine::KeepAlive(const std::string& lease_id,
                           std::function<void(absl::StatusOr<Millis>)> done) {
  ShardOfLease(lease_id).KeepAlive(lease_id, std::move(done));
}

void LockEngine::Revoke(const std::string& lease_id, const std::string& requester,
                        const std::string& reason,
                        std::function<void(absl::Status, const std::string&)> done,
                        const std::string& identity) {
  ShardOfLease(lease_id).Revoke(lease_id, requester, reason, std::move(done), identity);
}

void LockEngine::Proclaim(const std::string& lease_id, uint64_t fencing_token,
                          const std::map<std::string, std::string>& metadata,
                          std::function<void(absl::Status)> done) {
  ShardOfLease(lease_id).Proclaim(lease_id, fencing_token, metadata, std::move(done));
}

void LockEngine::Describe(const std::string& name,
                          std::function<void(absl::StatusOr<LockDescription>)> done) {
  if (absl::Status s = ValidateLockName(name); !s.ok()) return done(s);
  ShardOfSegment(EncodeLockName(name)).Describe(name, std::move(done));
}

void LockEngine::CheckToken(const std::string& name, uint64_t fencing_token, bool allow_stale,
                            std::function<void(absl::StatusOr<TokenCheck>)> done) {
  if (absl::Status s = ValidateLockName(name); !s.ok()) return done(s);
  ShardOfSegment(EncodeLockName(name)).CheckToken(name, fencing_token, allow_stale,
                                                  std::move(done));
}

void LockEngine::List(const std::string& prefix, int limit,
                      std::function<void(absl::StatusOr<LockList>)> done,
                      std::function<bool(const std::string&)> visible) {
  // Reads only: any connected session answers for every lock (the first
  // shard says UNAVAILABLE when none is).
  EngineShard* shard = shards_[0].get();
  for (auto& s : shards_) {
    if (s->connected()) {
      shard = s.get();
      break;
    }
  }
  shard->List(prefix, limit, std::move(done), std::move(visible));
}

void LockEngine::BeginDrain() {
  for (auto& shard : shards_) shard->BeginDrain();
}

void LockEngine::EndDrain() {
  for (auto& shard : shards_) shard->EndDrain();
}

bool LockEngine::serving() const {
  return std::all_of(shards_.begin(), shards_.end(), [](const auto& s) { return s->serving(); });
}

void LockEngine::SetServingListener(std::function<void(bool)> listener) {
  loops_[0]->RunAndWait([this, &listener] {
    serving_listener_ = std::move(listener);
    if (serving_listener_) serving_listener_(last_serving_);
  });
}

EngineStats LockEngine::stats() const {
  EngineStats total;
  for (const auto& shard : shards_) total.Add(shard->stats());
  return total;
}

std::vector<LockLoad> LockEngine::LockLoads(LoadsCache* cache) {
  cache->shards.resize(shards_.size());
  std::vector<LockLoad> out;
  for (size_t i = 0; i < shards_.size(); ++i) shards_[i]->LockLoads(&cache->shards[i], &out);
  return out;
}

void LockEngine::SetObserver(EngineObserver* observer) {
  for (auto& shard : shards_) shard->SetObserver(observer);
}

void LockEngine::AddSessionListener(std::function<void(size_t, SessionEvent)> listener) {
  for (auto& shard : shards_) shard->AddSessionListener(listener);
}

int64_t LockEngine::LocalGrantUnixMs(const std::string& path) const {
  // root/segment/node
  absl::string_view rest(path);
  if (!absl::ConsumePrefix(&rest, options_.root) || !absl::ConsumePrefix(&rest, "/")) return 0;
  const size_t slash = rest.find('/');
  if (slash == absl::string_view::npos) return 0;
  return ShardOfSegment(std::string(rest.substr(0, slash))).LocalGrantUnixMs(path);
}

}  // namespace turnstile
