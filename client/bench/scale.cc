// W5, scale: thousands of Acquire streams waiting on one replica at once.
// Measures what waiting costs the replica (memory, CPU while idle, ZooKeeper
// watches), then drains every lock and checks the outcome: each contender
// granted exactly once, grants in fencing-token (queue) order per lock, never
// a grant before the previous holder's release, and no contender node left.
// With --w5-restart-zk it restarts ZooKeeper while all wait, first, and
// checks that the replica came back on the same sessions with every watch.
// Before all that, the same streams on a bare gRPC server (--bare-server)
// give the baseline the replica's RSS is compared to.
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/bench/acquire_call.h"
#include "client/bench/bare_grpc.h"
#include "client/bench/scale_state.h"
#include "client/common/lock_name.h"

namespace turnstile::bench {

// Counts a correctness violation; keeps the first few messages.
void AddViolation(ScaleResult* r, const std::string& what) {
  constexpr size_t kKept = 20;
  ++r->violation_count;
  if (r->violations.size() < kKept) r->violations.push_back(what);
}

// A run can take minutes: say which phase it is in.
void Progress(const std::string& what) {
  std::printf("  .. %s\n", what.c_str());
  std::fflush(stdout);
}

std::string Seconds(Clock::time_point since) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s",
                std::chrono::duration<double>(Clock::now() - since).count());
  return buf;
}

double SecondsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

namespace {

void OnEnded(ScaleState* s, AcquireCall* c, const grpc::Status& st) {
  std::lock_guard<std::mutex> l(s->mu);
  ScaleLock& lock = s->locks[c->client];
  ++lock.ended;
  if (st.ok() && c->acquired && c->released && !c->lost) {
    lock.outcomes.push_back(
        {{c->token, c->acquired_at, c->released_at, c->release_requested_at},
         c->acquired_events});
  } else {
    ++s->failed;
    if (s->first_error.empty()) s->first_error = DescribeFailure(lock.name, *c, st);
  }
  s->cv.notify_all();
}

// A holder keeps its stream (and the lock) until the main thread releases
// it; a waiter releases as soon as it is granted (hold time 0).
AcquireCall* StartContender(ScaleState* s, int lock, bool holder, int channel,
                            const AcquireOpen& open, Clock::time_point rpc_deadline) {
  auto* c = new AcquireCall(
      &s->tracker,
      [s, holder](AcquireCall* c, const AcquireEvent& e, Clock::time_point) {
        const AcquireEvent::Type type = e.type();
        if (!holder) {
          if (type == AcquireEvent::ACQUIRED) c->Release();
          // The drain's grants and releases take no lock here.
          const bool first_queued = type == AcquireEvent::QUEUED && c->queued_events == 1;
          const bool early = type != AcquireEvent::QUEUED && !s->draining.load();
          if (!first_queued && !early) return;
          std::lock_guard<std::mutex> l(s->mu);
          if (first_queued) {
            ++s->queued;
          } else if (s->waiters_other++ == 0) {
            s->first_waiter_other = "a waiter on lock " + s->locks[c->client].name + " got " +
                                    AcquireEvent::Type_Name(type) + " before the drain";
          }
          s->cv.notify_all();
          return;
        }
        std::lock_guard<std::mutex> l(s->mu);
        ScaleLock& lk = s->locks[c->client];
        switch (type) {
          case AcquireEvent::ACQUIRED:
            if (!lk.holder_acquired) ++s->holders_acquired;
            lk.holder_acquired = true;
            break;
          case AcquireEvent::SUSPENDED:
            ++s->holders_suspended;
            break;
          case AcquireEvent::RESUMED:
            ++s->holders_resumed;
            break;
          case AcquireEvent::LOST:
            ++s->holders_lost;
            break;
          default:
            break;
        }
        s->cv.notify_all();
      },
      [s](AcquireCall* c, const grpc::Status& st, Clock::time_point) { OnEnded(s, c, st); });
  c->client = lock;
  c->Start(s->stubs[channel].get(), open, rpc_deadline, /*hold=*/holder);
  return c;
}

// Checks one drained lock's grants (all of its streams ended cleanly):
// each granted once, fencing tokens rising in grant order, and every grant
// after the previous holder sent its release. Appends to r's violations.
void CheckGrants(const ScaleLock& lock, std::vector<Outcome> outcomes, ScaleResult* r) {
  auto violation = [&](const std::string& what) {
    AddViolation(r, "lock " + lock.name + ": " + what);
  };
  // The client's arrival order of ACQUIRED is the grant order: each grant
  // follows the previous holder's release, which follows its ACQUIRED.
  std::sort(outcomes.begin(), outcomes.end(), [](const Outcome& a, const Outcome& b) {
    return a.grant.acquired_at < b.grant.acquired_at;
  });
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& cur = outcomes[i];
    ++r->grants_checked;
    if (cur.acquired_events != 1) {
      violation("a contender was granted " + std::to_string(cur.acquired_events) +
                " times (fencing token " + std::to_string(cur.grant.token) + ")");
    }
    if (i == 0) continue;
    const Outcome& prev = outcomes[i - 1];
    if (cur.grant.token <= prev.grant.token) {
      violation("grant " + std::to_string(i) + " has fencing token " +
                std::to_string(cur.grant.token) + ", not above the previous grant's " +
                std::to_string(prev.grant.token) + " (not in queue order)");
    }
    if (cur.grant.acquired_at < prev.grant.release_sent_at) {
      violation("grant " + std::to_string(i) + " (fencing token " +
                std::to_string(cur.grant.token) + ") arrived " +
                std::to_string(ToMs(prev.grant.release_sent_at - cur.grant.acquired_at)) +
                " ms before the previous holder sent its release: two holders at once");
    }
  }
}

}  // namespace

ScaleResult RunTurnstileScale(const BenchOptions& o, const std::string& lock_prefix) {
  ScaleResult r;
  auto s = std::make_unique<ScaleState>();

  // The shape: half on one lock, the other half spread evenly, plus the
  // reference locks.
  r.big_waiters = o.w5_waiters / 2;
  r.spread_waiters = o.w5_waiters - r.big_waiters;
  r.spread_locks = std::min(o.w5_spread_locks, r.spread_waiters);
  r.control_locks = o.w5_control_locks;
  r.control_waiters = o.w5_control_waiters;
  r.waiters = o.w5_waiters + r.control_locks * r.control_waiters;
  auto add_lock = [&](const std::string& suffix, Group g, int waiters) {
    ScaleLock lock;
    lock.name = lock_prefix + "-" + suffix;
    lock.group = g;
    lock.waiters = waiters;
    s->locks.push_back(std::move(lock));
  };
  add_lock("big", Group::kBig, r.big_waiters);
  for (int i = 0; i < r.spread_locks; ++i) {
    add_lock("s" + std::to_string(i), Group::kSpread,
             r.spread_waiters / r.spread_locks + (i < r.spread_waiters % r.spread_locks ? 1 : 0));
  }
  for (int i = 0; i < r.control_locks; ++i) {
    add_lock("c" + std::to_string(i), Group::kControl, r.control_waiters);
  }
  r.holders = static_cast<int>(s->locks.size());

  const int channels = std::max(1, o.w5_channels);
  for (int i = 0; i < channels; ++i) {
    s->channels.push_back(MakeChannel(o.server, 5000 + i));
    s->stubs.push_back(v1::LockService::NewStub(s->channels.back()));
  }
  if (!ConnectAll(s->channels, o.server, &r.error)) return r;

  // Generous bounds that still end a stuck run by themselves: queueing may
  // cost the replica O(queue length) per waiter (each lists the lock once).
  const Millis holders_budget = Millis(30000) + Millis(10) * r.holders;
  const Millis queue_budget = Millis(60000) + Millis(20) * r.waiters;
  const Millis watch_budget(30000);
  auto drain_budget = [](int handoffs) { return Millis(30000) + Millis(100) * handoffs; };
  const Millis all_drains = drain_budget(r.control_waiters) * r.control_locks +
                            drain_budget(r.big_waiters) + drain_budget(r.spread_waiters);
  // The restart command's own time is not known: 2 minutes for it.
  const Millis restart_budget = o.w5_restart_zk.empty()
                                    ? Millis(0)
                                    : Millis(120000) + kWatchesBackBudget + kResumeBudget;
  // (At most 1 h: the replica's default --max-wait-timeout.)
  const Millis wait_timeout = std::min<Millis>(
      holders_budget + queue_budget + watch_budget + o.w5_idle + restart_budget + all_drains +
          Millis(60000),
      Millis(3600 * 1000));
  std::vector<AcquireOpen> opens(s->locks.size());
  std::vector<std::string> lock_paths;
  for (size_t i = 0; i < s->locks.size(); ++i) {
    lock_paths.push_back(o.zk_root + "/" + EncodeLockName(s->locks[i].name));
    opens[i].set_name(s->locks[i].name);
    opens[i].set_owner("turnstile-bench");
    opens[i].mutable_wait_timeout()->set_seconds(wait_timeout.count() / 1000);
  }
  // Every stream of the run: the holders (lock i on channel i mod channels),
  // then the waiters, spread round-robin over the channels.
  std::vector<IdleStream> streams;
  for (size_t i = 0; i < s->locks.size(); ++i) {
    streams.push_back({&opens[i], static_cast<int>(i % channels)});
  }
  int next_channel = 0;
  for (size_t i = 0; i < s->locks.size(); ++i) {
    for (int j = 0; j < s->locks[i].waiters; ++j) {
      streams.push_back({&opens[i], next_channel});
      next_channel = (next_channel + 1) % channels;
    }
  }

  // The baseline first: gRPC alone (turnstile-bare-server) holding the same
  // streams, from the same client code, over as many channels, each
  // answered once and then idle for the same window before its RSS is read.
  // Before the replica's part rather than after it, so that this process
  // holds one set of streams at a time and the replica's part (its
  // measurement, the ZooKeeper restart, the drain) runs as it did without
  // the baseline; the two servers are separate processes, and the bare one
  // starts fresh, so the order changes neither's RSS.
  if (!o.bare_server.empty()) {
    Progress("gRPC baseline: " + std::to_string(streams.size()) +
             " idle Acquire streams on " + o.bare_server);
    r.bare = MeasureBareGrpc(o, streams);
    char line[200];
    std::snprintf(line, sizeof(line),
                  "gRPC baseline: RSS %.1f MB with %d idle streams (%.1f MB before them); "
                  "server stopped, exit status %d",
                  r.bare->rss_waiting_mb, r.bare->streams, r.bare->rss_before_mb,
                  r.bare->exit_status);
    Progress(r.bare->error.empty() ? line : "gRPC baseline failed: " + r.bare->error);
  }
  const Clock::time_point rpc_deadline = Clock::now() + wait_timeout + Millis(60000);

  // Ends the run early: releases every holder, cancels everything open.
  auto abort_run = [&](const std::string& why) {
    {
      std::lock_guard<std::mutex> l(s->mu);
      r.error = s->first_error.empty() ? why : why + ": " + s->first_error;
    }
    for (ScaleLock& lock : s->locks) {
      if (lock.holder != nullptr && !lock.holder_released) {
        lock.holder_released = true;
        lock.holder->Release();
      }
    }
    s->tracker.CancelAll();
    if (!s->tracker.WaitIdle(Clock::now() + Millis(30000))) {
      r.error += " (streams did not end after cancellation)";
      s.release();  // leak rather than free what callbacks may still use
    }
    return r;
  };

  if (o.server_pid > 0) r.rss_before_mb = ProcessRssBytes(o.server_pid) / 1048576.0;
  Mntr base, m;
  std::string mntr_error;
  if (!ReadMntr(o.zk, &base, &mntr_error)) return abort_run("mntr: " + mntr_error);

  // Every lock is taken first, so every waiter queues.
  for (size_t i = 0; i < s->locks.size(); ++i) {
    s->locks[i].holder = StartContender(s.get(), static_cast<int>(i), /*holder=*/true,
                                        streams[i].channel, opens[i], rpc_deadline);
  }
  {
    std::unique_lock<std::mutex> l(s->mu);
    if (!s->cv.wait_for(l, holders_budget, [&] {
          return s->holders_acquired == r.holders || s->failed > 0;
        }) || s->failed > 0) {
      const std::string why = "holders granted: " + std::to_string(s->holders_acquired) + "/" +
                              std::to_string(r.holders);
      l.unlock();
      return abort_run(why);
    }
  }

  Progress(std::to_string(r.holders) + " holders granted; opening " +
           std::to_string(r.waiters) + " waiting streams");
  const Clock::time_point queue_start = Clock::now();
  for (size_t k = s->locks.size(); k < streams.size(); ++k) {
    StartContender(s.get(), static_cast<int>(streams[k].open - opens.data()), /*holder=*/false,
                   streams[k].channel, *streams[k].open, rpc_deadline);
  }
  {
    std::unique_lock<std::mutex> l(s->mu);
    if (!s->cv.wait_for(l, queue_budget,
                        [&] { return s->queued == r.waiters || s->failed > 0; }) ||
        s->failed > 0) {
      const std::string why = "waiters QUEUED: " + std::to_string(s->queued) + "/" +
                              std::to_string(r.waiters) + " after " +
                              std::to_string(std::chrono::duration_cast<Millis>(
                                                 Clock::now() - queue_start).count()) +
                              " ms";
      l.unlock();
      return abort_run(why);
    }
  }
  r.queue_seconds = std::chrono::duration<double>(Clock::now() - queue_start).count();
  Progress("all QUEUED after " + Seconds(queue_start) + "; measuring the waiting replica");

  // QUEUED is sent before the waiter's watch is armed: let the watches land
  // (bounded) before measuring the idle replica.
  const double base_watches = MntrValue(base, "zk_watch_count");
  if (!ReadMntrWhen(o.zk, "zk_watch_count", base_watches + r.waiters,
                    Clock::now() + watch_budget, &m, &mntr_error)) {
    return abort_run("mntr: " + mntr_error);
  }
  if (o.server_pid > 0) {
    const double cpu0 = ProcessCpuSeconds(o.server_pid);
    const Clock::time_point t0 = Clock::now();
    std::this_thread::sleep_for(o.w5_idle);  // the measurement window itself
    const double cpu1 = ProcessCpuSeconds(o.server_pid);
    r.idle_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (cpu0 >= 0 && cpu1 >= 0) r.cpu_idle_percent = 100.0 * (cpu1 - cpu0) / r.idle_seconds;
    const int64_t rss = ProcessRssBytes(o.server_pid);
    if (rss >= 0) r.rss_waiting_mb = rss / 1048576.0;
  }
  if (!ReadMntr(o.zk, &m, &mntr_error)) return abort_run("mntr: " + mntr_error);
  r.watch_count = MntrValue(m, "zk_watch_count");
  r.watch_delta = r.watch_count - base_watches;

  // One node per contender while all wait. This also proves that the lock
  // paths are where the replica keeps its locks, so that finding them empty
  // after the drain means something.
  std::vector<int> nodes;
  std::string zk_error;
  if (!CountChildren(o, lock_paths, &nodes, &zk_error)) {
    return abort_run("listing the lock nodes while all wait: " + zk_error);
  }
  if (std::all_of(nodes.begin(), nodes.end(), [](int n) { return n == 0; })) {
    return abort_run("no contender nodes under " + o.zk_root +
                     " while all wait: is --zk-root the replica's?");
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int contenders = s->locks[i].waiters + 1;
    if (nodes[i] != contenders) {
      AddViolation(&r, "lock " + s->locks[i].name + ": " + std::to_string(nodes[i]) +
                           " nodes under " + lock_paths[i] + " while its " +
                           std::to_string(contenders) + " contenders wait (one each expected)");
    }
  }
  char measured[160];
  std::snprintf(measured, sizeof(measured),
                "while all wait: replica RSS %.1f MB, CPU %.2f%% of a core over %.1f s, "
                "ZooKeeper watches +%.0f%s",
                r.rss_waiting_mb, r.cpu_idle_percent, r.idle_seconds, r.watch_delta,
                o.w5_restart_zk.empty() ? "; draining" : "");
  Progress(measured);

  if (!o.w5_restart_zk.empty()) {
    std::string why;
    if (!RestartWhileWaiting(o, s.get(), lock_paths, &r, &why)) return abort_run(why);
  }

  // Releases the holders of `which` and waits until each of their streams
  // ended.
  auto drain = [&](const std::vector<size_t>& which, Millis budget) {
    s->draining = true;
    for (size_t i : which) {
      s->locks[i].holder_released = true;
      s->locks[i].holder->Release();
    }
    std::unique_lock<std::mutex> l(s->mu);
    return s->cv.wait_for(l, budget, [&] {
      if (s->failed > 0) return true;
      return std::all_of(which.begin(), which.end(), [&](size_t i) {
        return s->locks[i].ended == s->locks[i].waiters + 1;
      });
    }) && s->failed == 0;
  };
  std::vector<size_t> spread;
  for (size_t i = 0; i < s->locks.size(); ++i) {
    if (s->locks[i].group == Group::kControl &&
        !drain({i}, drain_budget(s->locks[i].waiters))) {
      return abort_run("reference lock " + s->locks[i].name + " did not drain");
    }
    if (s->locks[i].group == Group::kSpread) spread.push_back(i);
  }
  Clock::time_point phase = Clock::now();
  if (!drain({0}, drain_budget(r.big_waiters))) {
    return abort_run("lock " + s->locks[0].name + " did not drain");
  }
  Progress("the big lock drained in " + Seconds(phase));
  phase = Clock::now();
  if (!drain(spread, drain_budget(r.spread_waiters))) {
    return abort_run("the " + std::to_string(spread.size()) + " spread locks did not drain");
  }
  Progress("the spread locks drained in " + Seconds(phase) + "; checking");
  if (!s->tracker.WaitIdle(Clock::now() + Millis(30000))) {
    return abort_run("streams did not end");
  }

  // Every callback has run: the outcomes are final.
  DrainSamples big, control, spread_samples;
  for (ScaleLock& lock : s->locks) {
    CheckGrants(lock, lock.outcomes, &r);
    std::vector<Grant> grants;
    for (const Outcome& out : lock.outcomes) grants.push_back(out.grant);
    (lock.group == Group::kBig       ? big
     : lock.group == Group::kControl ? control
                                     : spread_samples)
        .AddLock(std::move(grants));
  }
  big.Fill(/*at_once=*/false, &r.big);
  control.Fill(/*at_once=*/false, &r.control);
  spread_samples.Fill(/*at_once=*/true, &r.spread);

  // Every contender's node must be gone (the lock nodes are containers:
  // empty, or already removed by ZooKeeper).
  std::vector<int> left;
  if (!CountChildren(o, lock_paths, &left, &zk_error)) {
    r.error = "listing the lock nodes after the drain: " + zk_error;
    return r;
  }
  r.lock_nodes_checked = static_cast<int>(left.size());
  for (size_t i = 0; i < left.size(); ++i) {
    if (left[i] == 0) continue;
    r.nodes_left += left[i];
    AddViolation(&r, "lock " + s->locks[i].name + ": " + std::to_string(left[i]) +
                         " node(s) left under " + lock_paths[i] + " after the drain");
  }
  return r;
}

}  // namespace turnstile::bench
