// turnstile bench: W5, scale: runs RunTurnstileScale after the bare gRPC
// baseline, then prints its table, checks and BENCH_JSON line.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "client/bench/bench_internal.h"
#include "client/bench/report.h"
#include "client/bench/workloads.h"

namespace turnstile::bench {
namespace {

// W5's ZooKeeper restart, for BENCH_JSON.
Json RestartJson(const ScaleRestart& x) {
  return Json()
      .Str("command", x.command)
      .Int("exit_status", x.exit_status)
      .Num("command_s", x.command_seconds)
      .Num("zk_uptime_s", x.zk_uptime_seconds)
      .Num("watches_before", x.watches_before)
      .Num("watches_after", x.watches_after)
      .Num("watches_back_s", x.watches_back_seconds)
      .Num("watches_back_after_up_s", x.watches_back_after_up_seconds)
      .Int("sessions_before", x.sessions_before)
      .Int("sessions_after", x.sessions_after)
      .Int("sessions_same", x.sessions_same ? 1 : 0)
      .Int("nodes_before", x.nodes_before)
      .Int("nodes_after", x.nodes_after)
      .Int("holders_suspended", x.holders_suspended)
      .Int("holders_resumed", x.holders_resumed)
      .Int("holders_lost", x.holders_lost)
      .Int("waiters_other_events", x.waiters_other_events)
      .Int("checked", x.checked ? 1 : 0);
}

void PrintRestart(const ScaleRestart& x, int holders) {
  auto row = [](const char* metric, const std::string& value, const char* target) {
    std::printf("  %-48s %16s   %s\n", metric, value.c_str(), target);
  };
  std::printf("\n");
  row("ZooKeeper restart while all wait", "value", "target");
  row("restart command (s)", Fmt(x.command_seconds, "%.2f"), "");
  row("ZooKeeper's uptime when read after it (s)", Fmt(x.zk_uptime_seconds, "%.2f"),
      "< the time since the restart began");
  row("all watches back, from the restart's start (s)", Fmt(x.watches_back_seconds, "%.2f"),
      "within the session timeout");
  row("  from ZooKeeper serving again (s)", Fmt(x.watches_back_after_up_seconds, "%.2f"), "");
  row("zk_watch_count before -> after",
      Fmt(x.watches_before, "%.0f") + " -> " + Fmt(x.watches_after, "%.0f"), "equal");
  if (!x.checked) {  // the run stopped before the checks
    row("sessions owning W5's nodes before", std::to_string(x.sessions_before), "");
    return;
  }
  row("sessions owning W5's nodes before / after",
      std::to_string(x.sessions_before) + " / " + std::to_string(x.sessions_after) +
          (x.sessions_same ? ", same" : ", CHANGED"),
      "same (no expiry)");
  row("holders SUSPENDED / RESUMED / LOST",
      std::to_string(x.holders_suspended) + " / " + std::to_string(x.holders_resumed) + " / " +
          std::to_string(x.holders_lost),
      ("LOST 0 (" + std::to_string(holders) + " holders)").c_str());
  row("waiters told anything but QUEUED", std::to_string(x.waiters_other_events), "0");
}

// Issue 20's W5 memory target: the replica's RSS while all wait over that of
// gRPC alone (turnstile-bare-server) holding the same idle streams.
constexpr double kRssRatioToBareGrpcTarget = 1.15;

double RssRatioToBareGrpc(const ScaleResult& r) {
  return r.bare ? Ratio(r.rss_waiting_mb, r.bare->rss_waiting_mb) : NAN;
}

// The baseline's RSS growth per W5 waiter, as the replica's is counted (its
// holders' streams included).
double BareGrpcRssPerWaiterKb(const ScaleResult& r) {
  return r.bare ? (r.bare->rss_waiting_mb - r.bare->rss_before_mb) * 1024 / r.waiters : NAN;
}

void AddBareGrpcJson(const ScaleResult& r, Json* j) {
  const BareGrpcResult none;
  const BareGrpcResult& b = r.bare ? *r.bare : none;
  j->Num("bare_grpc_rss_mb", b.rss_waiting_mb)
      .Num("bare_grpc_rss_before_mb", b.rss_before_mb)
      .Num("bare_grpc_rss_per_waiter_kb", BareGrpcRssPerWaiterKb(r))
      .Num("rss_ratio_to_bare_grpc", RssRatioToBareGrpc(r))
      .Num("rss_ratio_to_bare_grpc_target", kRssRatioToBareGrpcTarget);
  if (!r.bare) {
    j->Null("bare_grpc");
    return;
  }
  Json detail;
  detail.Int("pid", b.pid)
      .Int("streams", b.streams)
      .Num("open_s", b.open_seconds)
      .Int("exit_status", b.exit_status);
  if (b.error.empty()) {
    detail.Null("error");
  } else {
    detail.Str("error", b.error);
  }
  j->Obj("bare_grpc", detail);
}

void PrintBareGrpc(const ScaleResult& r) {
  if (!r.bare) {
    std::printf("  (no --bare-server: the gRPC baseline was not measured)\n");
    return;
  }
  char target[32];
  std::snprintf(target, sizeof(target), "<= %.2f", kRssRatioToBareGrpcTarget);
  std::printf("  %-48s %12s\n", "bare gRPC server RSS, same idle streams (MB)",
              Fmt(r.bare->rss_waiting_mb, "%.1f").c_str());
  std::printf("  %-48s %12s\n", "bare gRPC server RSS before them (MB)",
              Fmt(r.bare->rss_before_mb, "%.1f").c_str());
  std::printf("  %-48s %12s\n", "bare gRPC server RSS growth per waiter (KB)",
              Fmt(BareGrpcRssPerWaiterKb(r), "%.2f").c_str());
  std::printf("  %-48s %12s   %s\n", "replica RSS / bare gRPC server RSS",
              Fmt(RssRatioToBareGrpc(r), "%.2f").c_str(), target);
}

// Prints W5's violations and completes its JSON line with them; W5 then
// exits 3.
int ReportViolations(const ScaleResult& r, Json j, const std::string& also) {
  for (const std::string& v : r.violations) std::printf("  VIOLATION: %s\n", v.c_str());
  if (r.violation_count > r.violations.size()) {
    std::printf("  VIOLATION: ... %llu in all\n",
                static_cast<unsigned long long>(r.violation_count));
  }
  std::string error = std::to_string(r.violation_count) +
                      " correctness violation(s); the first: " + r.violations.front();
  if (!also.empty()) error += "; " + also;
  PrintJson(j.Num("ok", 0).Str("error", error));
  return 3;
}


}  // namespace

// W5's result: 0 ran and passed its checks, 1 did not run through, 3 a
// correctness check failed.
int RunW5(const BenchOptions& o) {
  std::printf("\n== W5 scale: %d Acquire streams waiting on one replica over %d channels; "
              "ZooKeeper fsync %s\n",
              o.w5_waiters, o.w5_channels, Fsync(o));
  std::printf("   every lock first taken by one holder; measured while all wait, %sthen "
              "drained (hold 0):\n   reference locks one by one, then the big lock, then the "
              "spread locks at once\n",
              o.w5_restart_zk.empty() ? "" : "ZooKeeper restarted, ");
  std::fflush(stdout);
  const ScaleResult r = RunTurnstileScale(o, LockName(o, "w5"));
  std::printf("  %d waiters: %d on one lock, %d over %d locks, %d reference locks x %d; "
              "%d holders\n",
              r.waiters, r.big_waiters, r.spread_waiters, r.spread_locks, r.control_locks,
              r.control_waiters, r.holders);
  Json j = JsonFor(o, "w5");
  j.Int("waiters", r.waiters)
      .Int("big_waiters", r.big_waiters)
      .Int("spread_locks", r.spread_locks)
      .Int("spread_waiters", r.spread_waiters)
      .Int("control_locks", r.control_locks)
      .Int("control_waiters", r.control_waiters)
      .Int("holders", r.holders)
      .Int("channels", o.w5_channels)
      .Num("queue_s", r.queue_seconds);
  if (r.restart) {
    j.Obj("zk_restart", RestartJson(*r.restart));
  } else {
    j.Null("zk_restart");
  }
  AddBareGrpcJson(r, &j);
  if (!r.error.empty()) {
    if (r.restart) PrintRestart(*r.restart, r.holders);
    std::printf("  ERROR: %s\n", r.error.c_str());
    // A run stopped by what a check flagged (e.g. a holder LOST across the
    // restart ends its stream) is a failed check.
    if (r.violation_count > 0) return ReportViolations(r, j, "the run stopped: " + r.error);
    PrintJson(j.Num("ok", 0).Str("error", r.error));
    return 1;
  }

  const double rss_per_waiter_kb = (r.rss_waiting_mb - r.rss_before_mb) * 1024 / r.waiters;
  std::printf("  all QUEUED after %.1f s\n", r.queue_seconds);
  std::printf("  %-48s %12s   %s\n", "while all wait", "value", "target");
  std::printf("  %-48s %12s\n", "replica RSS (MB)", Fmt(r.rss_waiting_mb, "%.1f").c_str());
  std::printf("  %-48s %12s\n", "replica RSS before W5 (MB)",
              Fmt(r.rss_before_mb, "%.1f").c_str());
  std::printf("  %-48s %12s\n", "replica RSS growth per waiter (KB)",
              Fmt(rss_per_waiter_kb, "%.2f").c_str());
  PrintBareGrpc(r);
  std::printf("  %-48s %12s   %s\n", "replica CPU while idle (% of one core)",
              Fmt(r.cpu_idle_percent, "%.2f").c_str(), "<= 2");
  std::printf("  %-48s %12s   = waiters (%d)\n", "ZooKeeper watches added (zk_watch_count)",
              Fmt(r.watch_delta, "%.0f").c_str(), r.waiters);
  if (o.server_pid <= 0) std::printf("  (no --server-pid: RSS and CPU not measured)\n");
  if (r.restart) PrintRestart(*r.restart, r.holders);

  const HerdResult& b = r.big;
  const HerdResult& c = r.control;
  std::printf("\n  %-40s %12s %12s %14s   %s\n", "drain", "big lock", "reference",
              "big/reference", "target");
  auto row = [](const char* metric, double big, double ref, const char* target,
                const char* fmt = "%.3f") {
    std::printf("  %-40s %12s %12s %14s   %s\n", metric, Fmt(big, fmt).c_str(),
                Fmt(ref, fmt).c_str(), Fmt(Ratio(big, ref), "%.2f").c_str(), target);
  };
  row("waiters per lock", r.big_waiters, r.control_waiters, "", "%.0f");
  row("handoffs/s", b.handoffs_per_second, c.handoffs_per_second, ">= 0.67");
  row("release sent -> next ACQUIRED p50 (ms)", b.release_to_acquired.p50_ms,
      c.release_to_acquired.p50_ms, "<= 1.5");
  row("release sent -> next ACQUIRED p99 (ms)", b.release_to_acquired.p99_ms,
      c.release_to_acquired.p99_ms, "");
  row("handoff p50 (ms)", b.handoff.p50_ms, c.handoff.p50_ms, "");
  std::printf("  spread: %d locks drained at once: %llu handoffs in %.2f s, %.0f handoffs/s, "
              "release sent -> next ACQUIRED p50 %s ms\n",
              r.spread_locks, static_cast<unsigned long long>(r.spread.handoffs),
              r.spread.drain_seconds, r.spread.handoffs_per_second,
              Fmt(r.spread.release_to_acquired.p50_ms).c_str());

  auto drain = [](const HerdResult& h) {
    return DrainJson(h)
        .Num("release_to_acquired_p50_ms", h.release_to_acquired.p50_ms)
        .Num("release_to_acquired_p99_ms", h.release_to_acquired.p99_ms)
        .Int("acquired_before_released", static_cast<int64_t>(h.acquired_before_released));
  };
  j.Num("rss_before_mb", r.rss_before_mb)
      .Num("rss_waiting_mb", r.rss_waiting_mb)
      .Num("rss_per_waiter_kb", rss_per_waiter_kb)
      .Num("idle_s", r.idle_seconds)
      .Num("cpu_idle_percent", r.cpu_idle_percent)
      .Num("zk_watch_count", r.watch_count)
      .Num("zk_watch_delta", r.watch_delta)
      .Obj("big", drain(b))
      .Obj("control", drain(c))
      .Obj("spread", drain(r.spread))
      .Obj("ratio", Json()
                        .Num("handoffs_per_s", Ratio(b.handoffs_per_second, c.handoffs_per_second))
                        .Num("release_to_acquired_p50_ms",
                             Ratio(b.release_to_acquired.p50_ms, c.release_to_acquired.p50_ms))
                        .Num("handoff_p50_ms", Ratio(b.handoff.p50_ms, c.handoff.p50_ms)))
      .Obj("checks", Json()
                         .Int("grants", static_cast<int64_t>(r.grants_checked))
                         .Int("lock_nodes", r.lock_nodes_checked)
                         .Int("nodes_left", r.nodes_left)
                         .Int("violations", static_cast<int64_t>(r.violation_count)));

  // The baseline failing is a workload that did not run through (exit 1),
  // unless a correctness check failed too (exit 3).
  const std::string bare_error =
      r.bare && !r.bare->error.empty() ? "gRPC baseline: " + r.bare->error : "";
  if (r.violation_count == 0) {
    std::printf("  checks: one node per contender while all wait; %s%llu grants, each contender "
                "granted once, in fencing-token order per lock, none before the previous holder's "
                "release; %d lock nodes empty after the drain\n",
                r.restart ? "across the ZooKeeper restart the same sessions, every watch back, "
                            "no hold lost, waiters told only QUEUED; "
                          : "",
                static_cast<unsigned long long>(r.grants_checked), r.lock_nodes_checked);
    if (!bare_error.empty()) {
      std::printf("  ERROR: %s\n", bare_error.c_str());
      PrintJson(j.Num("ok", 0).Str("error", bare_error));
      return 1;
    }
    PrintJson(j.Num("ok", 1).Null("error"));
    return 0;
  }
  return ReportViolations(r, j, bare_error);
}

}  // namespace turnstile::bench
