// turnstile bench: the tables, notes and BENCH_JSON lines the workloads print.
#include "client/bench/report.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "client/bench/slices.h"

namespace turnstile::bench {

double Ratio(double t, double f) { return f > 0 ? t / f : NAN; }

std::string Fmt(double v, const char* fmt) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

void PrintTable(const std::vector<Row>& rows) {
  std::printf("  %-40s %14s %14s %16s\n", "metric", "turnstile", "floor", "turnstile/floor");
  for (const Row& r : rows) {
    std::printf("  %-40s %14s %14s %16s\n", r.metric.c_str(), Fmt(r.turnstile).c_str(),
                Fmt(r.floor).c_str(), Fmt(Ratio(r.turnstile, r.floor), "%.2f").c_str());
  }
}

void PrintJson(const Json& j) {
  std::printf("BENCH_JSON %s\n", j.Text().c_str());
  std::fflush(stdout);
}

// Explains the clamped RELEASED -> ACQUIRED numbers.
void PrintHandoffNote(size_t handoffs, uint64_t before, const Latency& signed_ms) {
  std::printf("  %zu handoffs; in %llu the next holder's ACQUIRED arrived before the previous "
              "holder's RELEASED\n  (counted as 0 ms above; unclamped p50 %s ms, min %s ms)\n",
              handoffs, static_cast<unsigned long long>(before), Fmt(signed_ms.p50_ms).c_str(),
              Fmt(signed_ms.min_ms).c_str());
}

std::string JoinErrors(const std::vector<std::string>& errors) {
  std::string out;
  for (const auto& e : errors) {
    if (e.empty()) continue;
    if (!out.empty()) out += "; ";
    out += e;
  }
  return out;
}

Json Finish(Json j, const std::vector<std::string>& errors, bool* ok) {
  std::string error = JoinErrors(errors);
  j.Num("ok", error.empty() ? 1 : 0);
  if (error.empty()) {
    j.Null("error");
  } else {
    j.Str("error", error);
    *ok = false;
    std::printf("  ERROR: %s\n", error.c_str());
  }
  return j;
}

// --- workloads --------------------------------------------------------------------

// Whether ZooKeeper fsynced changes every write's latency: each table
// heading and JSON line says which was used.
const char* Fsync(const BenchOptions& o) { return o.zk_fsync.c_str(); }

Json JsonFor(const BenchOptions& o, const std::string& workload) {
  return Json().Str("workload", workload).Str("zk_fsync", o.zk_fsync);
}

std::string LockName(const BenchOptions& o, const std::string& suffix) {
  return "bench-" + o.run_tag + "-" + suffix;
}

std::string ErrorOf(const CycleResult& r, const char* side) {
  return r.errors == 0 ? "" : std::string(side) + ": " + r.error;
}

// CPU and context switches per cycle of each process, both sides: what a
// cycle costs the machine (on one machine that is the throughput).
void PrintUsage(const SideUsage& t, uint64_t t_cycles, const SideUsage& f, uint64_t f_cycles) {
  auto per = [](const SideUsage::Process& p, uint64_t cycles, bool cpu) {
    if (!p.known || cycles == 0) return std::nan("");
    return cpu ? p.cpu_s * 1000.0 / cycles : static_cast<double>(p.switches) / cycles;
  };
  std::printf("  per cycle (from /proc, per slice)           CPU (ms)  ctx switches   CPU / floor's process\n");
  const double floor_cpu = per(f.self, f_cycles, true);
  auto line = [&](const char* what, const SideUsage::Process& p, uint64_t cycles) {
    const double cpu = per(p, cycles, true);
    std::printf("  %-42s %9s %13s %23s\n", what, Fmt(cpu, "%.3f").c_str(),
                Fmt(per(p, cycles, false), "%.1f").c_str(), Fmt(Ratio(cpu, floor_cpu), "%.2f").c_str());
  };
  line("turnstile: turnstiled", t.server, t_cycles);
  line("turnstile: client side (this bench)", t.self, t_cycles);
  line("turnstile: ZooKeeper", t.zk, t_cycles);
  line("floor: its process (turnstile-zk-floor)", f.self, f_cycles);
  line("floor: ZooKeeper", f.zk, f_cycles);
  const double t_zk = per(t.zk, t_cycles, true), f_zk = per(f.zk, f_cycles, true);
  std::printf("  ZooKeeper CPU per turnstile cycle / per floor cycle: %s\n",
              Fmt(Ratio(t_zk, f_zk), "%.2f").c_str());
}

// W1 and W3: what gRPC alone costs per cycle (turnstile-bare-server
// --grant, the same client code), and what turnstile costs above it, each
// over the floor's process: the part of turnstile's cost no engine change
// can remove.
void PrintGrpcAlone(const CycleResult& b, const SideUsage& bu, const SideUsage& t,
                    uint64_t t_cycles, const SideUsage& f, uint64_t f_cycles) {
  auto per = [](const SideUsage::Process& p, uint64_t cycles, bool cpu) {
    if (!p.known || cycles == 0) return std::nan("");
    return cpu ? p.cpu_s * 1000.0 / cycles : static_cast<double>(p.switches) / cycles;
  };
  std::printf("  gRPC alone (turnstile-bare-server --grant: ACQUIRED at once, RELEASED on release, "
              "no lock;\n   same client code; one slice after each turnstile slice): %s cycles/s\n",
              Fmt(b.per_second, "%.1f").c_str());
  const double floor_cpu = per(f.self, f_cycles, true);
  auto line = [&](const char* what, double cpu, double switches) {
    std::printf("  %-42s %9s %13s %23s\n", what, Fmt(cpu, "%.3f").c_str(),
                Fmt(switches, "%.1f").c_str(), Fmt(Ratio(cpu, floor_cpu), "%.2f").c_str());
  };
  const double bs = per(bu.server, b.cycles, true), bc = per(bu.self, b.cycles, true);
  line("gRPC alone: server", bs, per(bu.server, b.cycles, false));
  line("gRPC alone: client side (this bench)", bc, per(bu.self, b.cycles, false));
  line("turnstiled above gRPC alone's server", per(t.server, t_cycles, true) - bs,
       per(t.server, t_cycles, false) - per(bu.server, b.cycles, false));
  line("client side above gRPC alone's client", per(t.self, t_cycles, true) - bc,
       per(t.self, t_cycles, false) - per(bu.self, b.cycles, false));
}

// The same, for BENCH_JSON.
Json UsageJson(const SideUsage& u, uint64_t cycles, bool server) {
  Json j;
  auto add = [&](const char* name, const SideUsage::Process& p) {
    if (!p.known || cycles == 0) return;
    j.Num(std::string(name) + "_cpu_ms_per_cycle", p.cpu_s * 1000.0 / cycles)
        .Num(std::string(name) + "_switches_per_cycle", static_cast<double>(p.switches) / cycles);
  };
  if (server) add("turnstiled", u.server);
  add(server ? "client" : "process", u.self);
  add("zookeeper", u.zk);
  return j;
}

// The heading line that says how the sides were ordered.
void PrintOrderNote(const BenchOptions& o) {
  char warm[64];
  if (o.warmup.count() > 0) {
    std::snprintf(warm, sizeof(warm), "after a %.1f s warm-up", o.warmup.count() / 1000.0);
  } else {
    std::snprintf(warm, sizeof(warm), "no warm-up (--warmup 0)");
  }
  if (o.slices > 1) {
    std::printf("   sides interleaved %s (A turnstile, B floor) in %d slices of %.2f s per side, "
                "%s\n",
                SliceOrder(o.slices).c_str(), o.slices, SliceLength(o).count() / 1000.0, warm);
  } else {
    std::printf("   sides not interleaved (--slices 1): turnstile, then floor, %s\n", warm);
  }
}

// Each slice's rate, in the order run: how much the sides drifted or
// wavered (other load on the machine) while they were measured.
void PrintSliceRates(const CycleSamples& t, const CycleSamples& f) {
  if (t.slice_rates.size() < 2 && f.slice_rates.size() < 2) return;
  auto list = [](const CycleSamples& r) {
    std::string out;
    for (double v : r.slice_rates) out += " " + Fmt(v, "%.0f");
    return out.empty() ? std::string(" -") : out;
  };
  std::printf("  cycles/s per slice, in order: turnstile%s; floor%s\n", list(t).c_str(),
              list(f).c_str());
}

// The fields of a drain that W4 and W5 share.
Json DrainJson(const HerdResult& r) {
  return Json()
      .Int("handoffs", static_cast<int64_t>(r.handoffs))
      .Num("handoff_p50_ms", r.handoff.p50_ms)
      .Num("handoff_p99_ms", r.handoff.p99_ms)
      .Num("handoff_mean_ms", r.handoff.mean_ms)
      .Num("drain_s", r.drain_seconds)
      .Num("handoffs_per_s", r.handoffs_per_second);
}

}  // namespace turnstile::bench
