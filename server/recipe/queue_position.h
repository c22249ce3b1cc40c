// The queue-position policy: what position a waiter is told (QUEUED) and
// when it is told again. Pure: the engine calls it with what it knows, the
// tests call it directly.
//
// A waiter's position counts from "next in line" = 1: for a mutex (or a
// read/write lock) the number of entries ahead of it; for a semaphore of N
// the entries ahead beyond the N holders, plus one.
//
// Reporting: always the first time and whenever the position grows (the
// client must never believe it is further ahead than it is); when it
// shrinks, at once within the last kEveryChangeWithin places of the front,
// further back only once it has halved or a second has passed since the
// last report. So a waiter 10,000 places back costs a message per halving
// or per second, not one per handoff, and the waiters near the front still
// see every step. (W4 at N = 1000: 15 QUEUED messages per handoff instead
// of ~500.)
#ifndef TURNSTILE_SERVER_RECIPE_QUEUE_POSITION_H_
#define TURNSTILE_SERVER_RECIPE_QUEUE_POSITION_H_

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "server/recipe/lock_name.h"

namespace turnstile {

inline constexpr int64_t kEveryChangeWithin = 10;
inline constexpr std::chrono::seconds kPositionRefresh{1};

// The position of a waiter with `ahead` entries ahead of it.
inline int64_t QueuePosition(ContenderKind kind, int32_t max_holders, int64_t ahead) {
  return kind == ContenderKind::kSemaphore ? std::max<int64_t>(1, ahead - max_holders + 1)
                                           : ahead;
}

// Whether `position` is reported, given the last one reported (< 0: none
// yet) and the time since that report.
inline bool ShouldReportPosition(int64_t position, int64_t last_reported,
                                 std::chrono::steady_clock::duration since_last) {
  if (last_reported < 0 || position > last_reported) return true;
  if (position == last_reported) return false;
  return position <= kEveryChangeWithin || position * 2 <= last_reported ||
         since_last >= kPositionRefresh;
}

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RECIPE_QUEUE_POSITION_H_
