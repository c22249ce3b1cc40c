// turnstile bench: the warm-up and the cycle workloads, W1 and W3 (each
// client on its own lock) and W2 (16 clients on one lock, handoffs).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "client/bench/bare_grpc.h"
#include "client/bench/bench_internal.h"
#include "client/bench/report.h"
#include "client/bench/slices.h"
#include "client/bench/workloads.h"

namespace turnstile::bench {
namespace {

// A side that could not even start: one error, no samples.
CycleSamples Failed(const std::string& error) {
  CycleSamples r;
  r.errors = 1;
  r.error = error;
  return r;
}

}  // namespace

// Before the first measured workload: o.warmup of unmeasured cycles, the
// sides in ABBA order (a quarter each). The turnstile side runs one client
// on a lock of its own and three on one shared lock (grants, queueing and
// handoffs: the paths W2..W4 take too); the floor the same shapes on one
// session (W1's create+getChildren+delete loop, then W2's contended
// recipe). Errors are printed, not counted: the workloads report their own.
void RunWarmup(const BenchOptions& o) {
  const Millis quarter = o.warmup / 4;
  const Clock::time_point start = Clock::now();
  CycleSamples t, f;
  TurnstileCycles turnstile(o, {LockName(o, "warmup-solo"), LockName(o, "warmup-shared"),
                                LockName(o, "warmup-shared"), LockName(o, "warmup-shared")});
  std::string error;
  if (!turnstile.Connect(&error)) t = Failed(error);
  std::unique_ptr<Floor> floor = Floor::Open(o, &error);
  if (floor == nullptr) f = Failed(error);
  Interleave(
      2,
      [&](int) {
        if (t.errors == 0) t.Merge(turnstile.Run(quarter));
        return t.errors == 0;
      },
      [&](int) {
        if (f.errors == 0) f.Merge(floor->Cycles("warmup", 1, quarter / 2));
        if (f.errors == 0) f.Merge(floor->ContendedLock("warmup-lock", 3, quarter / 2));
        return f.errors == 0;
      });
  floor.reset();
  std::printf("warm-up: %.1f s unmeasured (took %.1f s), ABBA: turnstile 1 client + 3 on one "
              "lock, %llu cycles; floor the same on one ZooKeeper session, %llu cycles\n",
              o.warmup.count() / 1000.0,
              std::chrono::duration<double>(Clock::now() - start).count(),
              static_cast<unsigned long long>(t.cycles), static_cast<unsigned long long>(f.cycles));
  if (t.errors > 0) std::printf("  warm-up, turnstile: %s\n", t.error.c_str());
  if (f.errors > 0) std::printf("  warm-up, floor: %s\n", f.error.c_str());
  std::fflush(stdout);
}

// W1 and W3: `clients` clients, each on its own lock.
bool RunSeparateLocks(const BenchOptions& o, const std::string& w, int clients) {
  const double secs = o.duration.count() / 1000.0;
  std::printf("\n== %s %s: %d client%s, %d lock%s, acquire+release cycles, hold 0, %.1f s per "
              "side; ZooKeeper fsync %s\n",
              w == "w1" ? "W1" : "W3", w == "w1" ? "uncontended" : "many locks", clients,
              clients == 1 ? "" : "s", clients, clients == 1 ? "" : "s", secs, Fsync(o));
  std::printf("   floor: create(ephemeral-sequential)+getChildren+delete cycles, %d loop%s on one "
              "ZooKeeper session\n",
              clients, clients == 1 ? "" : "s");
  PrintOrderNote(o);
  std::fflush(stdout);
  std::vector<std::string> names;
  for (int i = 0; i < clients; ++i) {
    names.push_back(LockName(o, clients == 1 ? w : w + "-" + std::to_string(i)));
  }
  CycleSamples ts, fs;
  TurnstileCycles turnstile(o, names);
  std::string error;
  if (!turnstile.Connect(&error)) ts = Failed(error);
  std::unique_ptr<Floor> floor = Floor::Open(o, &error);
  if (floor == nullptr) fs = Failed(error);
  const Millis slice = SliceLength(o);
  UsageMeter meter(o);
  SideUsage tu, fu, bu;
  // gRPC alone, right after each turnstile slice (same client code, no lock).
  CycleSamples bs;
  std::unique_ptr<BareCycles> bare;
  if (!o.bare_server.empty()) {
    bare = std::make_unique<BareCycles>();
    if (!bare->Start(o, names, &error)) bs = Failed(error);
  }
  const BatchCounters batches_before = ScrapeBatchCounters(o.metrics);
  Interleave(
      o.slices,
      [&](int) {
        if (ts.errors == 0) {
          ts.Merge(meter.Measure(&tu, true, [&] { return turnstile.Run(slice); }));
        }
        if (bare != nullptr && bs.errors == 0) bs.Merge(bare->Run(slice, &bu));
        return ts.errors == 0;
      },
      [&](int) {
        if (fs.errors == 0) {
          fs.Merge(meter.Measure(
              &fu, false, [&] { return floor->Cycles(w, clients, slice); }, floor->pid()));
        }
        return fs.errors == 0;
      });
  floor.reset();  // deletes the floor's nodes before the next workload
  bare.reset();
  const CycleResult t = ts.Result();
  const CycleResult f = fs.Result();
  const CycleResult b = bs.Result();
  const char* rate = w == "w1" ? "ops_per_s" : "cycles_per_s";
  PrintTable({{w == "w1" ? "ops/s (acquire+release cycles)" : "cycles/s", t.per_second, f.per_second},
              {"cycle p50 (ms)", t.cycle.p50_ms, f.cycle.p50_ms},
              {"cycle p99 (ms)", t.cycle.p99_ms, f.cycle.p99_ms}});
  std::printf("  cycles: turnstile %llu, floor %llu\n",
              static_cast<unsigned long long>(t.cycles), static_cast<unsigned long long>(f.cycles));
  PrintSliceRates(ts, fs);
  PrintUsage(tu, t.cycles, fu, f.cycles);
  if (!o.bare_server.empty()) PrintGrpcAlone(b, bu, tu, t.cycles, fu, f.cycles);
  const BatchCounters batches_after = ScrapeBatchCounters(o.metrics);
  const bool batches_known = batches_before.ok && batches_after.ok;
  const double cb = batches_after.create_batches - batches_before.create_batches;
  const double cc = batches_after.batched_creates - batches_before.batched_creates;
  const double db = batches_after.delete_batches - batches_before.delete_batches;
  const double dc = batches_after.batched_deletes - batches_before.batched_deletes;
  if (batches_known) {
    // Cycles that were not batched went alone (a batch of one is a plain request).
    std::printf("  batched ZooKeeper writes (turnstile side, /metrics): creates %.0f of %llu in "
                "%.0f multis (mean %.2f, largest so far %.0f); deletes %.0f in %.0f multis "
                "(mean %.2f, largest so far %.0f)\n",
                cc, static_cast<unsigned long long>(t.cycles), cb, cb > 0 ? cc / cb : 0.0,
                batches_after.largest_create, dc, db, db > 0 ? dc / db : 0.0,
                batches_after.largest_delete);
  }
  auto side = [&](const CycleResult& r) {
    return Json()
        .Int("cycles", static_cast<int64_t>(r.cycles))
        .Num(rate, r.per_second)
        .Num("cycle_p50_ms", r.cycle.p50_ms)
        .Num("cycle_p99_ms", r.cycle.p99_ms)
        .Num("cycle_mean_ms", r.cycle.mean_ms)
        .Int("errors", static_cast<int64_t>(r.errors));
  };
  bool ok = true;
  Json j = JsonFor(o, w);
  j.Int("clients", clients)
      .Int("locks", clients)
      .Num("duration_s", secs)
      .Int("slices_per_side", o.slices)
      .Num("warmup_s", o.warmup.count() / 1000.0)
      .Obj("turnstile", side(t))
      .Obj("floor", side(f).Str("op", "create_es+getChildren+delete"))
      .Obj("usage", Json()
                        .Obj("turnstile", UsageJson(tu, t.cycles, true))
                        .Obj("floor", UsageJson(fu, f.cycles, false)))
      .Obj("ratio", Json()
                        .Num(rate, Ratio(t.per_second, f.per_second))
                        .Num("cycle_p50_ms", Ratio(t.cycle.p50_ms, f.cycle.p50_ms))
                        .Num("cycle_p99_ms", Ratio(t.cycle.p99_ms, f.cycle.p99_ms)));
  if (batches_known) {
    j.Obj("batches", Json()
                         .Num("create_multis", cb)
                         .Num("batched_creates", cc)
                         .Num("create_batch_mean", cb > 0 ? cc / cb : 0.0)
                         .Num("create_batch_largest", batches_after.largest_create)
                         .Num("delete_multis", db)
                         .Num("batched_deletes", dc)
                         .Num("delete_batch_mean", db > 0 ? dc / db : 0.0)
                         .Num("delete_batch_largest", batches_after.largest_delete));
  }
  std::string bare_error;
  if (!o.bare_server.empty()) {
    Json usage;
    if (b.cycles > 0 && bu.server.known && bu.self.known) {
      usage.Num("server_cpu_ms_per_cycle", bu.server.cpu_s * 1000.0 / b.cycles)
          .Num("server_switches_per_cycle", static_cast<double>(bu.server.switches) / b.cycles)
          .Num("client_cpu_ms_per_cycle", bu.self.cpu_s * 1000.0 / b.cycles)
          .Num("client_switches_per_cycle", static_cast<double>(bu.self.switches) / b.cycles);
    }
    j.Obj("grpc_alone", side(b).Obj("usage", usage));
    // gRPC alone is a baseline, not a side: its failure is reported, and fails the run.
    bare_error = ErrorOf(b, "grpc_alone");
  }
  PrintJson(Finish(j, {ErrorOf(t, "turnstile"), ErrorOf(f, "floor"), bare_error}, &ok));
  return ok;
}

bool RunW2(const BenchOptions& o) {
  const double secs = o.duration.count() / 1000.0;
  const int clients = o.w2_clients;
  std::printf("\n== W2 contended: %d clients, 1 lock, hold 0, %.1f s per side; ZooKeeper fsync %s\n",
              clients, secs, Fsync(o));
  std::printf("   handoff = previous holder's RELEASED -> next holder's ACQUIRED (one clock, one "
              "process)\n");
  std::printf("   floor: cycles/s = %d clients of the same herd-free recipe on one ZooKeeper "
              "session;\n          handoff = delete issued -> getData watch fired in another "
              "session\n",
              clients);
  PrintOrderNote(o);
  if (o.slices > 1) {
    std::printf("   (each floor slot runs both floor measurements, one slice each, their order "
                "flipped every slot;\n    handoffs are paired within a slice)\n");
  }
  std::fflush(stdout);
  std::vector<std::string> names(clients, LockName(o, "w2"));
  CycleSamples ts, fs, hs;
  UsageMeter meter(o);
  SideUsage tu, fu;
  TurnstileCycles turnstile(o, names);
  std::string error;
  if (!turnstile.Connect(&error)) ts = Failed(error);
  std::unique_ptr<Floor> floor = Floor::Open(o, &error);
  if (floor == nullptr) {
    fs = Failed(error);
    hs = Failed(error);
  }
  const Millis slice = SliceLength(o);
  Interleave(
      o.slices,
      [&](int) {
        if (ts.errors == 0) {
          ts.Merge(meter.Measure(&tu, true, [&] { return turnstile.Run(slice); }));
        }
        return ts.errors == 0;
      },
      [&](int k) {
        // Contended cycles, then delete -> watch; the other way round in
        // every other slot, so neither sits nearer the start on average.
        auto cycles = [&] {
          if (fs.errors == 0) {
            fs.Merge(meter.Measure(
                &fu, false, [&] { return floor->ContendedLock("w2", clients, slice); },
                floor->pid()));
          }
        };
        auto handoffs = [&] {
          if (hs.errors == 0) hs.Merge(floor->DeleteToWatch("w2-handoff", slice));
        };
        if (k % 2 == 0) {
          cycles();
          handoffs();
        } else {
          handoffs();
          cycles();
        }
        return fs.errors == 0 && hs.errors == 0;
      });
  floor.reset();
  const CycleResult t = ts.Result();
  const CycleResult f = fs.Result();
  const CycleResult h = hs.Result();
  PrintTable({{"cycles/s", t.per_second, f.per_second},
              {"handoff p50 (ms)", t.handoff.p50_ms, h.handoff.p50_ms},
              {"handoff p99 (ms)", t.handoff.p99_ms, h.handoff.p99_ms},
              {"release sent -> next ACQUIRED p50 (ms)", t.release_to_acquired.p50_ms,
               h.handoff.p50_ms},
              {"release sent -> next ACQUIRED p99 (ms)", t.release_to_acquired.p99_ms,
               h.handoff.p99_ms}});
  PrintHandoffNote(t.handoff.count, t.acquired_before_released, t.handoff_signed);
  std::printf("  floor: %zu delete->watch samples\n", h.handoff.count);
  PrintSliceRates(ts, fs);
  PrintUsage(tu, t.cycles, fu, f.cycles);
  bool ok = true;
  Json j = JsonFor(o, "w2");
  j.Int("clients", clients)
      .Int("locks", 1)
      .Num("duration_s", secs)
      .Int("slices_per_side", o.slices)
      .Num("warmup_s", o.warmup.count() / 1000.0)
      .Obj("turnstile", Json()
                            .Int("cycles", static_cast<int64_t>(t.cycles))
                            .Num("cycles_per_s", t.per_second)
                            .Num("cycle_p50_ms", t.cycle.p50_ms)
                            .Num("cycle_p99_ms", t.cycle.p99_ms)
                            .Int("handoffs", static_cast<int64_t>(t.handoff.count))
                            .Num("handoff_p50_ms", t.handoff.p50_ms)
                            .Num("handoff_p99_ms", t.handoff.p99_ms)
                            .Num("handoff_mean_ms", t.handoff.mean_ms)
                            .Num("handoff_signed_p50_ms", t.handoff_signed.p50_ms)
                            .Num("handoff_signed_min_ms", t.handoff_signed.min_ms)
                            .Int("acquired_before_released",
                                 static_cast<int64_t>(t.acquired_before_released))
                            .Num("release_to_acquired_p50_ms", t.release_to_acquired.p50_ms)
                            .Num("release_to_acquired_p99_ms", t.release_to_acquired.p99_ms)
                            .Obj("usage", UsageJson(tu, t.cycles, true))
                            .Int("errors", static_cast<int64_t>(t.errors)))
      .Obj("floor", Json()
                        .Int("cycles", static_cast<int64_t>(f.cycles))
                        .Num("cycles_per_s", f.per_second)
                        .Int("handoffs", static_cast<int64_t>(h.handoff.count))
                        .Num("handoff_p50_ms", h.handoff.p50_ms)
                        .Num("handoff_p99_ms", h.handoff.p99_ms)
                        .Num("handoff_mean_ms", h.handoff.mean_ms)
                        .Str("cycles_op", "raw herd-free lock recipe, one session")
                        .Obj("usage", UsageJson(fu, f.cycles, false))
                        .Str("handoff_op", "delete issued -> getData watch fired (2 sessions)")
                        .Int("errors", static_cast<int64_t>(f.errors + h.errors)))
      .Obj("ratio", Json()
                        .Num("cycles_per_s", Ratio(t.per_second, f.per_second))
                        .Num("handoff_p50_ms", Ratio(t.handoff.p50_ms, h.handoff.p50_ms))
                        .Num("handoff_p99_ms", Ratio(t.handoff.p99_ms, h.handoff.p99_ms))
                        .Num("release_to_acquired_p50_ms",
                             Ratio(t.release_to_acquired.p50_ms, h.handoff.p50_ms))
                        .Num("release_to_acquired_p99_ms",
                             Ratio(t.release_to_acquired.p99_ms, h.handoff.p99_ms)));
  std::vector<std::string> errors = {ErrorOf(t, "turnstile"), ErrorOf(f, "floor"),
                                     ErrorOf(h, "floor handoff")};
  // Both floor measurements fail together when the floor cannot be opened.
  if (f.errors > 0 && h.errors > 0 && f.error == h.error) errors.pop_back();
  if (t.errors == 0 && t.handoff.count == 0) errors.push_back("turnstile: no handoff measured");
  PrintJson(Finish(j, errors, &ok));
  return ok;
}

}  // namespace turnstile::bench
