// The ordering rule: who holds a lock and whom a waiter must watch.
//
// Pure functions over contender names, with no I/O, so the rule that decides
// mutual exclusion is tested on its own. Order is the parsed sequence suffix
// (never the whole name), foreign children are ignored, and sequences near the
// signed 32-bit wrap order correctly. Thread-safe (no state).
#ifndef TURNSTILE_SERVER_ORDERING_H_
#define TURNSTILE_SERVER_ORDERING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/lock_name.h"

namespace turnstile {

// Parses `children` (node names under one lock node), drops every name that
// is not a contender name, and returns the contenders in queue order.
//
// Sequence numbers are the parent's cversion, a signed 32-bit counter that
// wraps from 2147483647 to -2147483648. A live queue spans far less than 2^31
// creates, so when both very large and very negative sequences are present
// the negative ones come after the wrap and sort last.
std::vector<ContenderName> OrderContenders(
    const std::vector<std::string>& children);

// Same, for already parsed names (re-sorts a copy).
std::vector<ContenderName> OrderContenders(std::vector<ContenderName> parsed);

// True if `a` comes before `b` in a queue that also contains both (wrap-aware
// when the two are more than 2^31 apart, consistent with OrderContenders for
// any queue spanning less than 2^30).
bool SequenceBefore(int32_t a, int32_t b);

struct OrderDecision {
  // The contender may hold the lock now.
  bool holds = false;
  // When !holds: the node name of the one contender whose deletion can let
  // this one proceed (mutex/semaphore: the one `holder_limit` places ahead;
  // shared: the nearest exclusive ahead).
  std::string watch;
  // Contenders ahead of `self` in the queue.
  int64_t ahead = 0;
};

// Decides for `self` (a node name present in `queue`, which is in queue
// order as returned by OrderContenders). `holder_limit` >= 1 is the number of
// contenders that may hold at once (1 = mutex). An exclusive contender holds
// when fewer than `holder_limit` contenders are ahead of it; a shared one
// holds when no exclusive contender is ahead of it.
// NOT_FOUND if `self` is not in `queue` (its node is gone: the caller lost
// its place), INVALID_ARGUMENT if holder_limit < 1.
absl::StatusOr<OrderDecision> Decide(const std::vector<ContenderName>& queue,
                                     absl::string_view self,
                                     int holder_limit);

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ORDERING_H_
