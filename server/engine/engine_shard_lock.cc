// The shard's lock and its checks (ShardLock, CheckMine), and delivery:
// sink calls and listeners run outside the lock, in production order. Part
// of EngineShard (server/engine/engine_shard.h).
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/engine/engine_shard.h"
#include "server/engine/engine_shard_internal.h"

namespace turnstile {

namespace {

// The shard whose lock this thread holds (ShardLock), or null.
thread_local const EngineShard* held_shard = nullptr;

[[noreturn]] void WrongShard(const std::string& what) {
  std::fprintf(stderr, "turnstile engine: shard check failed: %s\n", what.c_str());
  std::abort();
}

}  // namespace

EngineShard::ShardLock::ShardLock(const EngineShard* shard) : shard_(shard), outer_(held_shard) {
  if (shard->checks_ && outer_ != nullptr) {
    WrongShard(absl::StrCat("shard ", shard->index_, "'s lock taken by a thread holding shard ",
                            outer_->index_, "'s"));
  }
  shard->mu_.Lock();
  held_shard = shard;
}

EngineShard::ShardLock::~ShardLock() {
  held_shard = outer_;
  shard_->mu_.Unlock();
}

void EngineShard::CheckMine(const std::string& segment) const {
  if (checks_ && SessionIndexFor(segment, count_) != index_) {
    WrongShard(absl::StrCat("lock segment \"", segment, "\" belongs to shard ",
                            SessionIndexFor(segment, count_), ", not ", index_));
  }
}

void EngineShard::CheckMine(uint64_t id) const {
  if (checks_ && id % count_ != index_) {
    WrongShard(absl::StrCat("contender ", id, " belongs to shard ", id % count_, ", not ", index_));
  }
}

void EngineShard::Later(std::function<void()> fn) {
  pending_.push_back(std::move(fn));
}

void EngineShard::Emit(Contender* c, LockEvent e) {
  if (!c->sink) return;
  auto sink = c->sink;
  Later([sink, e = std::move(e)] { sink->OnEvent(e); });
}

void EngineShard::Finish(Contender* c, absl::Status status) {
  if (!c->sink) return;
  auto sink = std::move(c->sink);
  c->sink = nullptr;
  Retally(c);
  Later([sink, status = std::move(status)] { sink->OnFinish(status); });
}

void EngineShard::Deliver() {
  for (;;) {
    if (!deliver_mu_.TryLock()) return;  // the thread holding it delivers ours too
    for (;;) {
      std::deque<std::function<void()>> batch;
      {
        ShardLock l(this);
        if (options_.check_invariants) CheckLoads();
        if (shut_down_) pending_.clear();  // Quiesce: nothing more is delivered
        batch.swap(pending_);
      }
      if (batch.empty()) break;
      for (auto& fn : batch) fn();
    }
    deliver_mu_.Unlock();
    ShardLock l(this);
    if (pending_.empty()) return;
  }
}

}  // namespace turnstile
