// turnstile bench: what the workloads print. Each workload prints a table
// (turnstile, floor, turnstile/floor per metric), notes under it, and one
// line "BENCH_JSON {...}"; each heading and JSON line names --zk-fsync.
// Prints to stdout; not thread-safe (the workloads print from one thread).
#ifndef TURNSTILE_CLIENT_BENCH_REPORT_H_
#define TURNSTILE_CLIENT_BENCH_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "client/bench/bench_internal.h"

namespace turnstile::bench {

// t / f, NaN (printed "-") when f is not positive.
double Ratio(double t, double f);
// `v` with printf's `fmt`; "-" if not finite.
std::string Fmt(double v, const char* fmt = "%.3f");

struct Row {
  std::string metric;
  double turnstile;
  double floor;
};
void PrintTable(const std::vector<Row>& rows);
void PrintJson(const Json& j);
// Explains the clamped RELEASED -> ACQUIRED numbers.
void PrintHandoffNote(size_t handoffs, uint64_t before, const Latency& signed_ms);
// The non-empty errors, joined by "; ".
std::string JoinErrors(const std::vector<std::string>& errors);
// Completes `j` with "ok" and "error" (and prints the error; *ok = false).
Json Finish(Json j, const std::vector<std::string>& errors, bool* ok);

// Whether ZooKeeper fsynced changes every write's latency: each table
// heading and JSON line says which was used.
const char* Fsync(const BenchOptions& o);
Json JsonFor(const BenchOptions& o, const std::string& workload);
// "bench-<run tag>-<suffix>": names the bench's locks apart from others'.
std::string LockName(const BenchOptions& o, const std::string& suffix);
// "" for no errors, else "<side>: <first error>".
std::string ErrorOf(const CycleResult& r, const char* side);

// CPU and context switches per cycle of each process, both sides: what a
// cycle costs the machine (on one machine that is the throughput).
void PrintUsage(const SideUsage& t, uint64_t t_cycles, const SideUsage& f, uint64_t f_cycles);
// W1 and W3: what gRPC alone costs per cycle (turnstile-bare-server
// --grant, the same client code), and what turnstile costs above it, each
// over the floor's process: the part of turnstile's cost no engine change
// can remove.
void PrintGrpcAlone(const CycleResult& b, const SideUsage& bu, const SideUsage& t,
                    uint64_t t_cycles, const SideUsage& f, uint64_t f_cycles);
// The same, for BENCH_JSON.
Json UsageJson(const SideUsage& u, uint64_t cycles, bool server);
// The heading line that says how the sides were ordered.
void PrintOrderNote(const BenchOptions& o);
// Each slice's rate, in the order run: how much the sides drifted or
// wavered (other load on the machine) while they were measured.
void PrintSliceRates(const CycleSamples& t, const CycleSamples& f);
// The fields of a drain that W4 and W5 share.
Json DrainJson(const HerdResult& r);

}  // namespace turnstile::bench

#endif  // TURNSTILE_CLIENT_BENCH_REPORT_H_
