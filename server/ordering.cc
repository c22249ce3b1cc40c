#include "server/ordering.h"

namespace turnstile {

OrderDecision Decide(const LockQueue& view, int32_t seq, ContenderKind kind) {
  OrderDecision d;
  const LockQueue::Entry* blocker =
      kind == ContenderKind::kShared ? view.NearestExclusiveAhead(seq) : view.Ahead(seq);
  if (blocker == nullptr) {
    d.holds = true;
  } else {
    d.blockers.push_back(blocker);
  }
  return d;
}

}  // namespace turnstile
