#include "server/recipe/ordering.h"

namespace turnstile {

OrderDecision Decide(const LockQueue& view, int32_t seq, ContenderKind kind,
                     int32_t max_holders) {
  OrderDecision d;
  if (kind == ContenderKind::kSemaphore) {
    // Up to N + 1 entries ahead, nearest first.
    const size_t n = static_cast<size_t>(max_holders < 1 ? 1 : max_holders);
    absl::InlinedVector<const LockQueue::Entry*, 4> ahead;
    view.ForAhead(seq, [&](int32_t, const LockQueue::Entry& e) {
      ahead.push_back(&e);
      return ahead.size() <= n;
    });
    if (ahead.size() < n) {
      d.holds = true;
    } else if (ahead.size() == n) {  // the first waiter: every holder ahead, in queue order
      d.blockers.assign(ahead.rbegin(), ahead.rend());
      d.first_waiter = true;
    } else {
      d.blockers.push_back(ahead.front());  // its predecessor
    }
    return d;
  }
  const LockQueue::Entry* blocker =
      kind == ContenderKind::kShared ? view.NearestExclusiveAhead(seq) : view.Ahead(seq);
  if (blocker == nullptr) {
    d.holds = true;
  } else {
    d.blockers.push_back(blocker);
  }
  return d;
}

const LockQueue::Entry* FirstDisagreeingAhead(const LockQueue& view, int32_t seq,
                                              ContenderKind kind, int32_t max_holders) {
  if (!view.AnyDisagreeing(kind, max_holders)) return nullptr;
  const LockQueue::Entry* found = nullptr;
  const bool semaphore = kind == ContenderKind::kSemaphore;
  view.ForAhead(seq, [&](int32_t, const LockQueue::Entry& e) {
    const bool entry_semaphore = e.kind == ContenderKind::kSemaphore;
    if (semaphore != entry_semaphore || (semaphore && e.max_holders != max_holders)) {
      found = &e;
      return false;
    }
    return true;
  });
  return found;
}

WaiterWatches WatchesOf(const OrderDecision& decision) {
  WaiterWatches w;
  if (decision.holds || decision.blockers.empty()) return w;
  w.nearest = decision.blockers.back()->node;
  if (decision.first_waiter) {
    for (size_t i = 0; i + 1 < decision.blockers.size(); ++i) {
      w.others.push_back(decision.blockers[i]->node);
    }
  }
  return w;
}

}  // namespace turnstile
