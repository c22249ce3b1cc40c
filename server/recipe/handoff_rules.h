// Three rules of the recipe over a lock's view (LockQueue), without
// ZooKeeper or an engine, beside Decide (ordering.h) and the queue-position
// policy (queue_position.h): who must look again when a node leaves, whom a
// release hands the lock to in its own transaction, and whom a waiter asks
// to let go. The engine applies them to its own contenders.
#ifndef TURNSTILE_SERVER_RECIPE_HANDOFF_RULES_H_
#define TURNSTILE_SERVER_RECIPE_HANDOFF_RULES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "server/recipe/lock_queue.h"

namespace turnstile {

// After the node at `gone_seq` (of `gone_kind`) left the view `q` (already
// erased from it): the entries that may now hold or watch another node, in
// queue order. The first is the entry directly behind the departed one,
// which decides again whatever it watched. The others (only when an
// exclusive node left: the readers behind it up to the next exclusive
// entry, and that entry) decide again only if they watched the departed
// node. A reader's departure concerns only the entry behind it, so it costs
// no walk.
inline std::vector<int32_t> WhoDecidesAgain(const LockQueue& q, int32_t gone_seq,
                                            ContenderKind gone_kind) {
  std::vector<int32_t> out;
  q.ForBehind(gone_seq, [&](int32_t seq, const LockQueue::Entry& e) {
    out.push_back(seq);
    return gone_kind == ContenderKind::kExclusive && e.kind == ContenderKind::kShared;
  });
  return out;
}

// The entry that the release of (`seq`, `node`, of `kind`) can grant in the
// release's own transaction (delete, and check that this entry's node
// exists): the one directly behind it, when the releaser is the front of
// the view. None for a semaphore (its holders are not a front of one, and
// its first waiter hears of any holder's departure by its own watch), none
// for an entry not in the view or not at its front. Whether that entry may
// take the lock so (a local waiter watching the releaser) is the engine's
// to say.
inline const LockQueue::Entry* HandoffSuccessor(const LockQueue& q, int32_t seq,
                                                const std::string& node, ContenderKind kind) {
  if (kind == ContenderKind::kSemaphore || node.empty()) return nullptr;
  if (!q.Contains(seq, node) || q.Ahead(seq) != nullptr) return nullptr;
  return q.Behind(seq);
}

// The nodes a waiter (its own node `own_node`) asks to let go: the holders
// at the front of the view, which are the front reader and the readers
// directly behind it, or the exclusive front alone, or a semaphore's first
// holder (one permit is all the waiter needs; the oldest holder is asked).
// Nothing from the waiter's own node on, and no entry behind a waiting
// writer (it will hold before this waiter; the holders end before it).
inline std::vector<std::string> RevokeTargets(const LockQueue& q, const std::string& own_node) {
  std::vector<std::string> out;
  bool stop = false;
  q.ForFront(q.size(), [&](int64_t rank, int32_t, const LockQueue::Entry& e) {
    if (stop || e.node == own_node) {
      stop = true;
      return;
    }
    if (rank > 0 && e.kind != ContenderKind::kShared) {
      stop = true;  // a waiting writer: the holders end before it
      return;
    }
    out.push_back(e.node);
    stop = e.kind != ContenderKind::kShared;  // an exclusive front holds alone
  });
  return out;
}

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RECIPE_HANDOFF_RULES_H_
