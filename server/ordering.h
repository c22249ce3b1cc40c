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
// An N-holder semaphore (SPEC 2) is one more kind: its first waiter is
// blocked by every holder ahead, which is why `blockers` is a list.
#ifndef TURNSTILE_SERVER_ORDERING_H_
#define TURNSTILE_SERVER_ORDERING_H_

#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "server/lock_name.h"
#include "server/lock_queue.h"

namespace turnstile {

struct OrderDecision {
  // The contender may hold the lock now.
  bool holds = false;
  // When !holds: the entries of the view that block it, in queue order.
  // Pointers into the view: valid until it changes.
  absl::InlinedVector<const LockQueue::Entry*, 1> blockers;
};

// Decides for the contender at `seq` of `kind`. `seq` need not be in the
// view (a contender deciding where it would stand); only entries ahead of
// it count.
OrderDecision Decide(const LockQueue& view, int32_t seq, ContenderKind kind);

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ORDERING_H_
