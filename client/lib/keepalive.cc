#include "client/lib/keepalive.h"

#include <algorithm>
#include <cassert>
#include <utility>
#include <vector>

#include "client/lib/hold_core.h"
#include "client/lib/proto_convert.h"
#include "client/lib/steady_wait.h"

namespace turnstile::client::internal {
namespace {

// KeepAlive requests carry at most this many lease ids (the server's limit).
constexpr size_t kMaxLeasesPerKeepAlive = 100;

}  // namespace

// ---- KeepAliver ----

void KeepAliver::Add(const std::string& lease_id, Millis ttl, std::weak_ptr<HoldCore> core) {
  absl::MutexLock l(&mu_);
  if (stop_) return;
  const Millis interval = std::max(Millis(1), ttl / 3);
  const Clock::time_point due = Clock::now() + interval;
  leases_[lease_id] = Entry{interval, ttl, due, std::move(core)};
  ArmLocked(due);
}

void KeepAliver::Remove(const std::string& lease_id) {
  absl::MutexLock l(&mu_);
  leases_.erase(lease_id);
}

void KeepAliver::Shutdown() {
  std::shared_ptr<KeepAliveStream> stream;
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    leases_.clear();
    stream = std::move(stream_);
  }
  if (stream) stream->Cancel();
  stream.reset();
  if (loop_->InLoopThread()) return;
  Streams& s = *streams_;
  absl::MutexLock l(&s.mu);
  const Clock::time_point deadline = Clock::now() + Millis(5000);
  while (s.live != 0) {
    if (!WaitBefore(s.cv, s.mu, deadline)) break;
  }
}

void KeepAliver::ArmLocked(Clock::time_point when) {
  const uint64_t generation = timer_.Arm(when);
  if (generation == 0) return;
  loop_->RunAt(when, [weak = weak_from_this(), generation] {
    if (auto self = weak.lock()) self->Renew(generation);
  });
}

void KeepAliver::Renew(uint64_t generation) {
  std::shared_ptr<KeepAliveStream> stream;
  std::vector<v1::KeepAliveRequest> requests;
  {
    absl::MutexLock l(&mu_);
    if (stop_ || !timer_.Fire(generation) || leases_.empty()) return;
    const Clock::time_point now = Clock::now();
    Millis min_ttl = Millis::max();
    for (const auto& [id, e] : leases_) min_ttl = std::min(min_ttl, e.ttl);
    // An answer overdue by a whole TTL (at least 1 s): the stream is stuck.
    // The old one is cancelled and left to end; a new one takes over now.
    if (stream_) {
      std::optional<Clock::time_point> oldest = stream_->OldestUnanswered();
      if (oldest && now - *oldest > std::max(Millis(1000), min_ttl)) {
        stream_->Cancel();
        stream_.reset();
      }
    }
    Clock::time_point next = Clock::time_point::max();
    for (auto& [id, e] : leases_) {
      if (e.next_due <= now) {
        e.next_due = now + e.interval;
        if (requests.empty() ||
            static_cast<size_t>(requests.back().lease_ids_size()) >= kMaxLeasesPerKeepAlive) {
          requests.emplace_back();
        }
        requests.back().add_lease_ids(id);
      }
      next = std::min(next, e.next_due);
    }
    ArmLocked(next);
    if (requests.empty()) return;
    if (!stream_) {
      {
        absl::MutexLock count(&streams_->mu);
        ++streams_->live;
      }
      // A new stream opens with the first request.
      stream_ = std::make_shared<KeepAliveStream>(weak_from_this(), loop_);
      stream_->Start(*stub_, std::move(requests.front()));
      requests.erase(requests.begin());
    }
    stream = stream_;
  }
  for (auto& req : requests) {
    // Refused: the stream ended; OnStreamDone drops it, the next round opens
    // another.
    if (!stream->Send(std::move(req))) break;
  }
}

void KeepAliver::OnResponse(const v1::KeepAliveResponse& resp, Clock::time_point sent) {
  struct Action {
    std::shared_ptr<HoldCore> core;
    bool gone;
    Clock::time_point valid_until;
    std::string message;
  };
  std::vector<Action> actions;
  {
    absl::MutexLock l(&mu_);
    for (const auto& ls : resp.leases()) {
      auto it = leases_.find(ls.lease_id());
      if (it == leases_.end()) continue;
      std::shared_ptr<HoldCore> core = it->second.core.lock();
      if (!core) {
        leases_.erase(it);
        continue;
      }
      if (ls.code() == static_cast<int32_t>(grpc::StatusCode::OK)) {
        // Conservative: the validity counts from when the request was sent.
        actions.push_back(Action{std::move(core), false, sent + FromDuration(ls.valid_for()), ""});
      } else if (ls.code() == static_cast<int32_t>(grpc::StatusCode::NOT_FOUND)) {
        leases_.erase(it);
        actions.push_back(Action{std::move(core), true, {}, ls.message()});
      }
      // Other codes (UNAVAILABLE, ...): retried at the next renewal.
    }
  }
  for (auto& a : actions) {
    if (a.gone) {
      a.core->OnLeaseGone(a.message);
    } else {
      a.core->OnRenewed(a.valid_until);
    }
  }
}

void KeepAliver::OnStreamDone(const KeepAliveStream* stream) {
  std::shared_ptr<KeepAliveStream> dropped;  // released after the lock
  {
    absl::MutexLock l(&mu_);
    if (stream_.get() == stream) dropped = std::move(stream_);
  }
  // Counted as ended once its OnDone returned and it let go of the loop: a
  // task posted now runs after that (the loop runs one thing at a time).
  loop_->Post([streams = streams_] {
    absl::MutexLock l(&streams->mu);
    --streams->live;
    streams->cv.SignalAll();
  });
}

// ---- KeepAliveStream ----

void KeepAliveStream::Start(v1::LockService::Stub& stub, v1::KeepAliveRequest first) {
  NoteSent();
  AsyncStream::Start(
      [&stub](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) {
        return stub.PrepareAsyncKeepAlive(ctx, cq);
      },
      std::move(first), shared_from_this());
}

bool KeepAliveStream::Send(v1::KeepAliveRequest req) {
  NoteSent();
  return Write(std::move(req), /*last=*/false);
}

std::optional<KeepAliveStream::Clock::time_point> KeepAliveStream::OldestUnanswered() const {
  AssertOnLoop();
  if (sent_.empty()) return std::nullopt;
  return sent_.front();
}

void KeepAliveStream::NoteSent() {
  AssertOnLoop();
  sent_.push_back(Clock::now());
}

void KeepAliveStream::OnRead(const v1::KeepAliveResponse& response) {
  Clock::time_point sent = Clock::now();
  if (!sent_.empty()) {
    sent = sent_.front();
    sent_.pop_front();
  }
  if (auto owner = owner_.lock()) owner->OnResponse(response, sent);
}

void KeepAliveStream::OnDone(const grpc::Status&) {
  if (auto owner = owner_.lock()) owner->OnStreamDone(this);
}

void KeepAliveStream::AssertOnLoop() const {
#ifndef NDEBUG
  assert(loop()->InLoopThread());
#endif
}

}  // namespace turnstile::client::internal
