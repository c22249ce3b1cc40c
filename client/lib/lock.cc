// Lock, the public handle (client.h), and Lock::Hold, its share of a
// HoldCore (lock_hold.h).
//
// Release is idempotent: a second Release of a handle returns OK without a
// server call; off the EventLoop thread it first waits (bounded) for what a
// first Release made on the EventLoop did not wait for, so that once a
// Release or the Lock's destructor returns off the loop, no callback of the
// handle runs again.
#include "client/lib/lock_hold.h"

#include <string>
#include <utility>

namespace turnstile::client {

absl::Status Lock::Hold::Release() {
  if (released_.exchange(true)) {
    // Released before, perhaps on the EventLoop thread (from a callback),
    // which does not wait: off that thread, wait now as the first Release
    // would have, so that no callback runs after this returns.
    core_->AwaitSettled();
    return absl::OkStatus();
  }
  LockStatus final;
  absl::Status st = core_->ReleaseHandle(id_, &final);
  absl::MutexLock l(&mu_);
  final_ = std::move(final);
  return st;
}

LockStatus Lock::Hold::Status() const {
  {
    absl::MutexLock l(&mu_);
    if (final_) {
      LockStatus s = *final_;
      s.valid_for = Millis(0);
      return s;
    }
  }
  return core_->Status();
}

namespace {
const std::string& EmptyString() {
  static const std::string* empty = new std::string();
  return *empty;
}
}  // namespace

Lock::Lock(std::shared_ptr<Hold> hold) : hold_(std::move(hold)) {}
Lock::Lock(Lock&& other) noexcept = default;
Lock& Lock::operator=(Lock&& other) noexcept {
  if (this != &other) {
    if (hold_) hold_->Release().IgnoreError();
    hold_ = std::move(other.hold_);
  }
  return *this;
}
Lock::~Lock() {
  if (hold_) hold_->Release().IgnoreError();
}

uint64_t Lock::fencing_token() const { return hold_ ? hold_->core().fencing_token() : 0; }
const std::string& Lock::lease_id() const { return hold_ ? hold_->core().lease_id() : EmptyString(); }
const std::string& Lock::name() const { return hold_ ? hold_->core().name() : EmptyString(); }

LockStatus Lock::status() const {
  if (!hold_) {
    LockStatus s;
    s.state = LockState::kReleased;
    s.valid_for = Millis(0);
    s.message = "moved-from Lock";
    return s;
  }
  return hold_->Status();
}

int Lock::hold_count() const { return hold_ ? hold_->HoldCount() : 0; }

absl::Status Lock::Release() { return hold_ ? hold_->Release() : absl::OkStatus(); }

}  // namespace turnstile::client
