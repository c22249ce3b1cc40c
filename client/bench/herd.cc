// turnstile bench: W4, the herd: N waiters behind one holder, drained, on
// both sides.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "client/bench/bench_internal.h"
#include "client/bench/report.h"
#include "client/bench/slices.h"
#include "client/bench/workloads.h"

namespace turnstile::bench {

bool RunW4(const BenchOptions& o) {
  std::printf("\n== W4 herd: N waiters queued behind one holder, then drained (hold 0); N = ");
  for (size_t i = 0; i < o.herd_sizes.size(); ++i) {
    std::printf("%s%d", i ? ", " : "", o.herd_sizes[i]);
  }
  std::printf("; ZooKeeper fsync %s\n", Fsync(o));
  std::printf("   handoff = RELEASED at the holder -> ACQUIRED at the next; ZooKeeper counters are "
              "mntr deltas over the drain / N\n");
  std::printf("   floor: a chain of N+1 sequential nodes, each watched (getData) by its successor; "
              "handoff = delete issued -> watch fired\n");
  // One drain per N and side; which side drains first alternates with N
  // (see "fair comparison" above): neither is always the one that runs on
  // a ZooKeeper the other has just warmed.
  std::string firsts[2];  // the sizes at which the turnstile / the floor drains first
  for (size_t k = 0; k < o.herd_sizes.size(); ++k) {
    firsts[k % 2] += (firsts[k % 2].empty() ? "" : ", ") + std::to_string(o.herd_sizes[k]);
  }
  std::printf("   one drain per N and side: turnstile first at N = %s%s%s; ", firsts[0].c_str(),
              firsts[1].empty() ? "" : "; floor first at N = ", firsts[1].c_str());
  if (o.warmup.count() > 0) {
    std::printf("after a %.1f s warm-up\n", o.warmup.count() / 1000.0);
  } else {
    std::printf("no warm-up (--warmup 0)\n");
  }
  std::fflush(stdout);
  bool ok = true;
  std::vector<Json> herd;
  std::vector<std::string> all_errors;
  struct Line {
    HerdResult t, f;
  };
  std::vector<Line> lines;
  for (size_t k = 0; k < o.herd_sizes.size(); ++k) {
    const int n = o.herd_sizes[k];
    const bool floor_first = k % 2 == 1;
    HerdResult t, f;
    auto run_turnstile = [&] {
      t = RunTurnstileHerd(o, LockName(o, "w4-" + std::to_string(n)), n);
    };
    auto run_floor = [&] {
      std::string floor_error;
      if (auto floor = Floor::Open(o, &floor_error)) {
        f = floor->Chain("w4-" + std::to_string(n), n);
      } else {
        f.n = n;
        f.error = floor_error;
      }
    };
    if (floor_first) {
      run_floor();
      run_turnstile();
    } else {
      run_turnstile();
      run_floor();
    }
    // A failed side has no numbers: "-" in the table, null in the JSON.
    for (HerdResult* r : {&t, &f}) {
      if (r->error.empty()) continue;
      HerdResult blank;
      blank.n = r->n;
      blank.error = r->error;
      for (Latency* l : {&blank.handoff, &blank.handoff_signed, &blank.release_to_acquired}) {
        l->p50_ms = l->p99_ms = l->mean_ms = l->min_ms = l->max_ms = NAN;
      }
      blank.drain_seconds = blank.handoffs_per_second = NAN;
      blank.zk.packets = blank.zk.notifications = NAN;
      blank.zk.deleted_watches = blank.zk.changed_watches = NAN;
      blank.packets_per_handoff = blank.notifications_per_handoff = NAN;
      blank.queued_events_per_handoff = NAN;
      *r = blank;
    }
    std::printf("\n  -- N = %d (%s first)\n", n, floor_first ? "floor" : "turnstile");
    PrintTable({{"handoff p50 (ms)", t.handoff.p50_ms, f.handoff.p50_ms},
                {"handoff p99 (ms)", t.handoff.p99_ms, f.handoff.p99_ms},
                {"release sent -> next ACQUIRED p50 (ms)", t.release_to_acquired.p50_ms,
                 f.handoff.p50_ms},
                {"release sent -> next ACQUIRED p99 (ms)", t.release_to_acquired.p99_ms,
                 f.handoff.p99_ms},
                {"handoffs/s during the drain", t.handoffs_per_second, f.handoffs_per_second},
                {"ZK packets / handoff", t.packets_per_handoff, f.packets_per_handoff},
                {"ZK watch notifications / handoff", t.notifications_per_handoff,
                 f.notifications_per_handoff},
                {"gRPC QUEUED events / handoff", t.queued_events_per_handoff, NAN}});
    if (t.error.empty()) PrintHandoffNote(t.handoffs, t.acquired_before_released, t.handoff_signed);
    std::vector<std::string> errors;
    if (!t.error.empty()) errors.push_back("turnstile N=" + std::to_string(n) + ": " + t.error);
    if (!f.error.empty()) errors.push_back("floor N=" + std::to_string(n) + ": " + f.error);
    for (const auto& e : errors) {
      std::printf("  ERROR: %s\n", e.c_str());
      all_errors.push_back(e);
    }
    auto side = [](const HerdResult& r, bool turnstile) {
      Json j = DrainJson(r);
      j.Num("zk_packets", r.zk.packets)
          .Num("zk_watch_notifications", r.zk.notifications)
          .Num("zk_deleted_watches", r.zk.deleted_watches)
          .Num("zk_changed_watches", r.zk.changed_watches)
          .Num("packets_per_handoff", r.packets_per_handoff)
          .Num("watch_notifications_per_handoff", r.notifications_per_handoff);
      if (turnstile) {
        j.Num("queued_events_per_handoff", r.queued_events_per_handoff)
            .Int("acquired_before_released", static_cast<int64_t>(r.acquired_before_released))
            .Num("handoff_signed_p50_ms", r.handoff_signed.p50_ms)
            .Num("handoff_signed_min_ms", r.handoff_signed.min_ms)
            .Num("release_to_acquired_p50_ms", r.release_to_acquired.p50_ms)
            .Num("release_to_acquired_p99_ms", r.release_to_acquired.p99_ms);
      }
      return j;
    };
    Json entry;
    entry.Int("n", n)
        .Str("first", floor_first ? "floor" : "turnstile")
        .Obj("turnstile", side(t, true))
        .Obj("floor", side(f, false))
        .Obj("ratio", Json()
                          .Num("handoff_p50_ms", Ratio(t.handoff.p50_ms, f.handoff.p50_ms))
                          .Num("handoff_p99_ms", Ratio(t.handoff.p99_ms, f.handoff.p99_ms))
                          .Num("release_to_acquired_p50_ms",
                               Ratio(t.release_to_acquired.p50_ms, f.handoff.p50_ms))
                          .Num("release_to_acquired_p99_ms",
                               Ratio(t.release_to_acquired.p99_ms, f.handoff.p99_ms))
                          .Num("handoffs_per_s", Ratio(t.handoffs_per_second, f.handoffs_per_second))
                          .Num("packets_per_handoff",
                               Ratio(t.packets_per_handoff, f.packets_per_handoff))
                          .Num("watch_notifications_per_handoff",
                               Ratio(t.notifications_per_handoff, f.notifications_per_handoff)));
    if (errors.empty()) {
      entry.Null("error");
    } else {
      entry.Str("error", JoinErrors(errors));
    }
    herd.push_back(entry);
    lines.push_back({t, f});
  }

  std::printf("\n  -- against N (turnstile | floor)\n");
  std::printf("  %6s %21s %21s %21s %19s %15s %15s %9s\n", "N", "handoff p50 ms", "handoff p99 ms",
              "rel.sent->acq p50 ms", "handoffs/s", "packets/hoff", "notifs/hoff", "QUEUED/h");
  for (const Line& l : lines) {
    std::printf("  %6d %10s|%-10s %10s|%-10s %10s|%-10s %9s|%-9s %7s|%-7s %7s|%-7s %9s\n", l.t.n,
                Fmt(l.t.handoff.p50_ms).c_str(), Fmt(l.f.handoff.p50_ms).c_str(),
                Fmt(l.t.handoff.p99_ms).c_str(), Fmt(l.f.handoff.p99_ms).c_str(),
                Fmt(l.t.release_to_acquired.p50_ms).c_str(), Fmt(l.f.handoff.p50_ms).c_str(),
                Fmt(l.t.handoffs_per_second, "%.0f").c_str(),
                Fmt(l.f.handoffs_per_second, "%.0f").c_str(),
                Fmt(l.t.packets_per_handoff, "%.2f").c_str(),
                Fmt(l.f.packets_per_handoff, "%.2f").c_str(),
                Fmt(l.t.notifications_per_handoff, "%.2f").c_str(),
                Fmt(l.f.notifications_per_handoff, "%.2f").c_str(),
                Fmt(l.t.queued_events_per_handoff, "%.1f").c_str());
  }
  Json j = JsonFor(o, "w4");
  j.Num("warmup_s", o.warmup.count() / 1000.0).Arr("herd", herd);
  if (all_errors.empty()) {
    j.Num("ok", 1).Null("error");
  } else {
    j.Num("ok", 0).Str("error", JoinErrors(all_errors));
    ok = false;
  }
  PrintJson(j);
  return ok;
}

}  // namespace turnstile::bench
