// The shard's loop and its checks (OnLoop, RunOnLoop, CheckMine), and
// delivery: sink calls and listeners run between sections, in production
// order. Part of EngineShard (server/engine/engine_shard.h).
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

// The shard whose section this thread is in (OnLoop), or null.
thread_local const EngineShard* in_section = nullptr;

[[noreturn]] void WrongShard(const std::string& what) {
  std::fprintf(stderr, "turnstile engine: shard check failed: %s\n", what.c_str());
  std::abort();
}

}  // namespace

EngineShard::OnLoop::OnLoop(const EngineShard* shard) : outer_(in_section) {
  if (shard->checks_) {
    if (outer_ != nullptr) {
      WrongShard(absl::StrCat("a section of shard ", shard->index_,
                              " opened inside one of shard ", outer_->index_));
    }
    if (!shard->loop_->OwnedHere()) {
      WrongShard(absl::StrCat("shard ", shard->index_, " entered off its loop"));
    }
  }
  in_section = shard;
}

EngineShard::OnLoop::~OnLoop() { in_section = outer_; }

void EngineShard::RunOnLoop(std::function<void()> fn) const { loop_->Run(std::move(fn)); }

void EngineShard::RunOnLoopAndWait(std::function<void()> fn) const {
  loop_->RunAndWait(std::move(fn));
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
  if (delivering_) return;  // a sink called an entry point: the outer call delivers
  delivering_ = true;
  for (;;) {
    std::deque<std::function<void()>> batch;
    {
      OnLoop l(this);
      if (options_.check_invariants) CheckLoads();
      if (shut_down_) pending_.clear();  // Quiesce: nothing more is delivered
      batch.swap(pending_);
    }
    if (batch.empty()) break;
    for (auto& fn : batch) fn();
  }
  delivering_ = false;
}

}  // namespace turnstile
