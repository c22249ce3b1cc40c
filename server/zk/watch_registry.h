// ZkClientSession's registry of watchers (internal to server/zk/).
//
// The C client sees a watcher only as a numeric id; the callable lives
// here, so a watch that never fires (its session expired or closed) is
// dropped with the registry instead of leaking. Thread-safe; its lock is a
// leaf, never held while a watcher runs.
#ifndef TURNSTILE_SERVER_ZK_WATCH_REGISTRY_H_
#define TURNSTILE_SERVER_ZK_WATCH_REGISTRY_H_

#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace turnstile {
namespace zk_internal {

// Process-wide, so the C watcher function finds a watcher by id alone.
// Also counts each session's live data watchers per path (GetData and
// ExistsWatch; `data_path` empty for children watches): RemoveWatch must
// not take the server's watch from under another watcher of the same
// session and path, e.g. an observer's (LockObservers) beside the engine's.
template <typename Owner, typename Watcher>
class WatchRegistry {
 public:
  uint64_t Add(Owner* owner, Watcher w, const std::string& data_path = {}) {
    absl::MutexLock l(&mu_);
    uint64_t id = ++next_id_;
    entries_.emplace(id, Entry{owner, std::move(w), data_path});
    if (!data_path.empty()) ++data_paths_[{owner, data_path}];
    return id;
  }
  Watcher Take(uint64_t id, Owner** owner) {
    absl::MutexLock l(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return nullptr;
    *owner = it->second.owner;
    Watcher w = std::move(it->second.watcher);
    EraseLocked(it);
    return w;
  }
  void Drop(uint64_t id) {
    absl::MutexLock l(&mu_);
    auto it = entries_.find(id);
    if (it != entries_.end()) EraseLocked(it);
  }
  void DropAll(Owner* owner) {
    absl::MutexLock l(&mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.owner == owner ? EraseLocked(it) : std::next(it);
    }
  }
  // Whether `owner` has a live data watcher on `path`.
  bool WatchesData(Owner* owner, const std::string& path) {
    absl::MutexLock l(&mu_);
    return data_paths_.count({owner, path}) > 0;
  }

 private:
  struct Entry {
    Owner* owner;
    Watcher watcher;
    std::string data_path;
  };
  using Entries = std::unordered_map<uint64_t, Entry>;
  typename Entries::iterator EraseLocked(typename Entries::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!it->second.data_path.empty()) {
      auto p = data_paths_.find({it->second.owner, it->second.data_path});
      if (p != data_paths_.end() && --p->second <= 0) data_paths_.erase(p);
    }
    return entries_.erase(it);
  }
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  Entries entries_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<Owner*, std::string>, int> data_paths_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zk_internal
}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ZK_WATCH_REGISTRY_H_
