// Lock::Hold: one Lock object's share of a HoldCore (one handle; the
// reentrant handles of a hold share its HoldCore). Internal to the client
// library; Lock (client.h) is its public face, lock.cc its code.
#ifndef TURNSTILE_CLIENT_LIB_LOCK_HOLD_H_
#define TURNSTILE_CLIENT_LIB_LOCK_HOLD_H_

#include <atomic>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/lib/client.h"
#include "client/lib/hold_core.h"

namespace turnstile::client {

class Lock::Hold {
 public:
  Hold(std::shared_ptr<internal::HoldCore> core, int id) : core_(std::move(core)), id_(id) {}

  // Idempotent. Once it (or the Lock's destructor) returns off the
  // EventLoop thread, no callback of the handle runs again (an object its
  // callbacks point to may then be destroyed).
  absl::Status Release() ABSL_LOCKS_EXCLUDED(mu_);
  LockStatus Status() const ABSL_LOCKS_EXCLUDED(mu_);
  int HoldCount() const { return released_.load() ? 0 : core_->live_handles(); }
  const internal::HoldCore& core() const { return *core_; }

 private:
  const std::shared_ptr<internal::HoldCore> core_;
  const int id_;
  std::atomic<bool> released_{false};
  // Taken after the HoldCore's lock is released (a leaf).
  mutable absl::Mutex mu_;
  std::optional<LockStatus> final_ ABSL_GUARDED_BY(mu_);  // once released
};

}  // namespace turnstile::client

#endif  // TURNSTILE_CLIENT_LIB_LOCK_HOLD_H_
