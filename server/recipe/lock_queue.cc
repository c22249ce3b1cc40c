#include "server/recipe/lock_queue.h"

#include <iterator>
#include <optional>
#include <utility>

namespace turnstile {

void LockQueue::ReplaceWith(
    const std::vector<std::string>& children,
    const std::function<uint64_t(const std::string&)>& local_id,
    const std::function<bool(const Entry&)>& keep) {
  Map fresh;
  for (const auto& child : children) {
    std::optional<ContenderName> n = ParseContenderName(child);
    if (!n) continue;  // a foreign child never takes part
    Entry e;
    e.node = n->node;
    e.kind = n->kind;
    e.local_id = local_id(e.node);
    e.max_holders = n->max_holders;
    fresh.emplace(n->sequence, std::move(e));
  }
  for (auto& [seq, e] : entries_) {
    if (fresh.count(seq) == 0 && keep(e)) fresh.emplace(seq, std::move(e));
  }
  entries_.swap(fresh);
  semaphores_by_n_.clear();
  others_ = 0;
  for (const auto& [seq, e] : entries_) Count(e, +1);
}

void LockQueue::Count(const Entry& e, int delta) {
  if (e.kind != ContenderKind::kSemaphore) {
    others_ += delta;
    return;
  }
  auto it = semaphores_by_n_.emplace(e.max_holders, 0).first;
  it->second += delta;
  if (it->second == 0) semaphores_by_n_.erase(it);
}

void LockQueue::Insert(int32_t seq, Entry e) {
  auto it = entries_.find(seq);
  if (it != entries_.end()) {
    Count(it->second, -1);
    it->second = std::move(e);
    Count(it->second, +1);
    return;
  }
  Count(entries_.emplace(seq, std::move(e)).first->second, +1);
}

bool LockQueue::AnyDisagreeing(ContenderKind kind, int32_t max_holders) const {
  if (kind != ContenderKind::kSemaphore) return !semaphores_by_n_.empty();
  if (others_ > 0) return true;
  return !semaphores_by_n_.empty() &&
         (semaphores_by_n_.size() > 1 || semaphores_by_n_.begin()->first != max_holders);
}

void LockQueue::ForAhead(int32_t seq,
                         const std::function<bool(int32_t, const Entry&)>& fn) const {
  auto it = entries_.lower_bound(seq);
  while (it != entries_.begin()) {
    --it;
    if (!fn(it->first, it->second)) return;
  }
}

bool LockQueue::Erase(int32_t seq, const std::string& node) {
  auto it = entries_.find(seq);
  if (it == entries_.end() || it->second.node != node) return false;
  Count(it->second, -1);
  entries_.erase(it);
  return true;
}

size_t LockQueue::EraseRemoteBefore(int32_t seq) {
  size_t n = 0;
  for (auto it = entries_.begin(); it != entries_.end() && SequenceBefore(it->first, seq);) {
    if (it->second.local_id == 0) {
      Count(it->second, -1);
      it = entries_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

bool LockQueue::Contains(int32_t seq, const std::string& node) const {
  auto it = entries_.find(seq);
  return it != entries_.end() && it->second.node == node;
}

const LockQueue::Entry* LockQueue::Ahead(int32_t seq) const {
  auto it = entries_.lower_bound(seq);
  if (it == entries_.begin()) return nullptr;
  return &std::prev(it)->second;
}

const LockQueue::Entry* LockQueue::Behind(int32_t seq) const {
  auto it = entries_.upper_bound(seq);
  return it == entries_.end() ? nullptr : &it->second;
}

const LockQueue::Entry* LockQueue::NearestExclusiveAhead(int32_t seq) const {
  auto it = entries_.lower_bound(seq);
  while (it != entries_.begin()) {
    --it;
    if (it->second.kind != ContenderKind::kShared) return &it->second;
  }
  return nullptr;
}

void LockQueue::ForBehind(int32_t seq,
                          const std::function<bool(int32_t, const Entry&)>& fn) const {
  for (auto it = entries_.upper_bound(seq); it != entries_.end(); ++it) {
    if (!fn(it->first, it->second)) return;
  }
}

int64_t LockQueue::CountAhead(int32_t seq) const {
  return static_cast<int64_t>(std::distance(entries_.begin(), entries_.lower_bound(seq)));
}

void LockQueue::ForFront(size_t limit,
                         const std::function<void(int64_t, int32_t, const Entry&)>& fn) const {
  int64_t rank = 0;
  for (auto it = entries_.begin(); it != entries_.end() && static_cast<size_t>(rank) < limit;
       ++it, ++rank) {
    fn(rank, it->first, it->second);
  }
}

}  // namespace turnstile
