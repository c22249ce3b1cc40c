// turnstile bench: the workloads RunBench runs, in the order it runs them.
// Each prints its table and BENCH_JSON line (report.h); they run one at a
// time, from RunBench's thread.
#ifndef TURNSTILE_CLIENT_BENCH_WORKLOADS_H_
#define TURNSTILE_CLIENT_BENCH_WORKLOADS_H_

#include <string>

#include "client/bench/bench_internal.h"

namespace turnstile::bench {

// Before the first measured workload: o.warmup of unmeasured cycles on both
// sides (cycles.cc). Errors are printed, not counted.
void RunWarmup(const BenchOptions& o);
// W1 (w = "w1", 1 client) and W3 (w = "w3"): each client on its own lock
// (cycles.cc). False if a side failed.
bool RunSeparateLocks(const BenchOptions& o, const std::string& w, int clients);
// W2: 16 clients on one lock, handoff latency (cycles.cc).
bool RunW2(const BenchOptions& o);
// W4: one drain per herd size and side (herd.cc).
bool RunW4(const BenchOptions& o);
// W5 (scale_report.cc): 0 ran and passed its checks, 1 did not run
// through, 3 a correctness check failed.
int RunW5(const BenchOptions& o);
// W6 (scrape.cc): W2 with --w5-waiters parked on other locks, with and
// without a /metrics scrape every 100 ms. False if it did not run through.
bool RunW6(const BenchOptions& o);

}  // namespace turnstile::bench

#endif  // TURNSTILE_CLIENT_BENCH_WORKLOADS_H_
