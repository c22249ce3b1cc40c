// turnstile bench: fair comparison, the slices W1..W3 interleave.
//
// Measuring one side after the other favours the second: ZooKeeper (a JVM)
// is still compiling its hot paths during the first seconds of load, and
// the replica is cold too. So before the first measured workload both sides
// run unmeasured cycles (--warmup), and W1..W3 split each side's --duration
// into --slices slices run in Thue-Morse order: slot i belongs to the
// turnstile side (A) when i has an even number of one bits, i.e. AB, ABBA,
// ABBABAAB, ... Whatever drifts during a workload and weighs on both sides
// alike (the JIT, caches filling, other load on the machine) then falls on
// both equally: a linear drift cancels with 2 slices per side, a quadratic
// one with 4. A side's result is its slices merged: cycles summed, rates
// over the summed measured windows, latency samples pooled; W2's handoffs
// are paired within a slice only (TurnstileCycles::Run). W4 drains are not
// sliced (one drain is one measurement, and running each twice would
// double the longest workload): the side that goes first alternates with
// the herd size instead (RunW4).
#ifndef TURNSTILE_CLIENT_BENCH_SLICES_H_
#define TURNSTILE_CLIENT_BENCH_SLICES_H_

#include <functional>
#include <string>

#include "client/bench/bench_internal.h"

namespace turnstile::bench {

// Whether slot `slot` of the interleaved order is the turnstile side's.
bool TurnstileSlot(int slot);
// "ABBABAAB" for 4 slices per side.
std::string SliceOrder(int slices);
// Runs `slices` slices of each side in SliceOrder; each callback measures
// one slice (its argument: how many of its side ran before it) and returns
// false on an error, after which its side runs no more slices (they would
// fail too, and a failed contended floor slice may leave nodes that would
// stall the next).
void Interleave(int slices, const std::function<bool(int)>& turnstile,
                const std::function<bool(int)>& floor);
// The length of one slice of W1..W3.
Millis SliceLength(const BenchOptions& o);

}  // namespace turnstile::bench

#endif  // TURNSTILE_CLIENT_BENCH_SLICES_H_
