// Registry: a Client's reentrant holds, (name, owner) -> the HoldCore this
// Client holds under that owner (AcquireOptions::reentrant). Internal to
// the client library. Thread-safe; its lock is a leaf (nothing is taken
// under it, and a HoldCore it drops is dropped after it).
#ifndef TURNSTILE_CLIENT_LIB_REENTRANCY_H_
#define TURNSTILE_CLIENT_LIB_REENTRANCY_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace turnstile::client::internal {

class HoldCore;

class Registry {
 public:
  std::shared_ptr<HoldCore> Find(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    auto it = holds_.find(key);
    if (it == holds_.end()) return nullptr;
    return it->second.lock();
  }
  void Put(const std::string& key, const std::shared_ptr<HoldCore>& core)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    holds_[key] = core;
  }
  // Forgets `key` if it names `core` (or a hold already gone).
  void Forget(const std::string& key, const HoldCore* core) ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<HoldCore> found;  // dropped after the lock
    absl::MutexLock l(&mu_);
    auto it = holds_.find(key);
    if (it == holds_.end()) return;
    found = it->second.lock();
    if (!found || found.get() == core) holds_.erase(it);
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::weak_ptr<HoldCore>> holds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace turnstile::client::internal

#endif  // TURNSTILE_CLIENT_LIB_REENTRANCY_H_
