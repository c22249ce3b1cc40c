// The ordering rule: whether a contender holds its lock, and which nodes
// block it (the ones whose departure can let it proceed: what it watches).
//
// One pure predicate per kind, in the style of Curator's lock driver:
// (the lock's ordered view, this contender) -> (holds?, blockers). The
// engine decides grants and watches with it, Describe classifies holders
// and waiters with it, and the tests test it, so a test of the rule is a
// test of what runs. No I/O; thread-safe (no state).
//
//   exclusive (mutex)  holds when nothing is ahead; blocked by the entry
//                      directly ahead (its predecessor), never by the holder
//                      further up: a release wakes one contender.
//   shared (read)      holds when no exclusive entry is ahead; blocked by
//                      the nearest exclusive entry ahead (readers in
//                      between coexist with it).
//   semaphore (N)      holds when fewer than N entries are ahead. The first
//                      waiter (exactly N ahead) is blocked by every one of
//                      them, so any holder's departure wakes exactly it;
//                      every other waiter by its predecessor only. A holder
//                      writes a grant mark on its node, which wakes the
//                      waiter behind it: that one is now the first waiter,
//                      lists the lock once and watches the holders ahead.
//                      A departure wakes at most two contenders, and no
//                      contender lists the children more than twice (when
//                      it joins, and when it becomes the first waiter).
//
// Why the semaphore rule is exact although a view may be stale: entries
// ahead of a contender can only disappear, so a view (the latest listing
// minus the departures learnt since) can only count too many ahead, never
// too few. "Holds" is therefore never wrong. "First waiter" can be wrong
// only by counting departed entries; its watches on them answer "no node",
// which removes them, and it re-decides (then holds). A waiter whose view
// says more than N ahead may in truth be the first waiter; but then its
// predecessor holds, which the predecessor's grant mark tells it (its read
// of the predecessor, or the data watch on it, when the mark comes later):
// it lists the children and decides from that exact view.
//
// Kinds do not mix on one lock (semaphores of different N neither): see
// FirstDisagreeingAhead. Until a disagreeing contender is gone the rules
// count it like any other entry, which can only make others wait longer.
#ifndef TURNSTILE_SERVER_RECIPE_ORDERING_H_
#define TURNSTILE_SERVER_RECIPE_ORDERING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "server/recipe/lock_name.h"
#include "server/recipe/lock_queue.h"

namespace turnstile {

struct OrderDecision {
  // The contender may hold the lock now.
  bool holds = false;
  // When !holds: the entries of the view that block it, in queue order.
  // Pointers into the view: valid until it changes.
  absl::InlinedVector<const LockQueue::Entry*, 1> blockers;
  // A semaphore's first waiter: `blockers` are every entry ahead of it (all
  // holders), not just its predecessor. (For N = 1 both are one entry.)
  bool first_waiter = false;
};

// What a waiter watches, from its decision (!holds): `nearest`, the blocker
// directly ahead of it (a departure, or a data change such as a grant
// mark, makes it decide again); and, for a semaphore's first waiter,
// `others`: every other holder ahead of it, in queue order (any one's
// departure may let it hold). Other waiters watch one node.
struct WaiterWatches {
  std::string nearest;
  std::vector<std::string> others;
};
WaiterWatches WatchesOf(const OrderDecision& decision);

// Decides for the contender at `seq` of `kind` (for kSemaphore,
// `max_holders` is its N >= 1). `seq` need not be in the view (a contender
// deciding where it would stand); only entries ahead of it count.
OrderDecision Decide(const LockQueue& view, int32_t seq, ContenderKind kind,
                     int32_t max_holders = 0);

// A contender that joins a lock is refused (FAILED_PRECONDITION, leaving no
// node) when an entry ahead of it disagrees: a semaphore's entry with
// another N, or one of the other family (exclusive and shared contenders
// mix; semaphores mix with neither). Only entries AHEAD count: the earliest
// contender of a lock keeps it, two that join at once never refuse each
// other both, and nobody already queued or holding is disturbed. The first
// disagreeing entry ahead (nearest first), or nullptr. O(1) when nothing
// in the view disagrees (LockQueue::AnyDisagreeing).
const LockQueue::Entry* FirstDisagreeingAhead(const LockQueue& view, int32_t seq,
                                              ContenderKind kind, int32_t max_holders = 0);

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RECIPE_ORDERING_H_
