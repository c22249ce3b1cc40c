// W5's shared state: the locks, the streams' outcomes and the counters the
// streams' callbacks update (under ScaleState::mu) while the main thread
// waits on ScaleState::cv; and the steps scale.cc and scale_restart.cc
// share. Internal to W5.
#ifndef TURNSTILE_CLIENT_BENCH_SCALE_STATE_H_
#define TURNSTILE_CLIENT_BENCH_SCALE_STATE_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "client/bench/acquire_call.h"
#include "client/bench/bench_internal.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile::bench {

enum class Group { kBig, kSpread, kControl };

// A stream that ended with ACQUIRED and RELEASED.
struct Outcome {
  Grant grant;
  int acquired_events = 0;
};

struct ScaleLock {
  std::string name;
  Group group = Group::kBig;
  int waiters = 0;
  AcquireCall* holder = nullptr;  // main thread; alive until released (hold)
  bool holder_released = false;   // main thread
  bool holder_acquired = false;   // GUARDED_BY(ScaleState::mu)
  int ended = 0;                  // GUARDED_BY(ScaleState::mu) holder included
  std::vector<Outcome> outcomes;  // GUARDED_BY(ScaleState::mu)
};

struct ScaleState {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::LockService::Stub>> stubs;
  std::vector<ScaleLock> locks;  // fixed before the first stream starts

  std::mutex mu;
  std::condition_variable cv;
  int holders_acquired = 0;  // GUARDED_BY(mu)
  int queued = 0;            // GUARDED_BY(mu) waiters that got a QUEUED
  int failed = 0;            // GUARDED_BY(mu)
  std::string first_error;   // GUARDED_BY(mu)
  // The holders' SUSPENDED, RESUMED and LOST events (a ZooKeeper restart
  // suspends every hold; none may be lost).
  int holders_suspended = 0;  // GUARDED_BY(mu)
  int holders_resumed = 0;    // GUARDED_BY(mu)
  int holders_lost = 0;       // GUARDED_BY(mu)
  // Set before the first holder is released: until then a waiter must be
  // told nothing but QUEUED.
  std::atomic<bool> draining{false};
  int waiters_other = 0;          // GUARDED_BY(mu) events at waiters before it
  std::string first_waiter_other;  // GUARDED_BY(mu)

  CallTracker tracker;  // last: destroyed (reaping calls) first
};

// Counts a correctness violation; keeps the first few messages.
void AddViolation(ScaleResult* r, const std::string& what);
// A run can take minutes: say which phase it is in.
void Progress(const std::string& what);
// "12.3 s" since `since`.
std::string Seconds(Clock::time_point since);
double SecondsBetween(Clock::time_point from, Clock::time_point to);

// The restart's bounds: every watch back this long after the restart
// command returned (ZooKeeper serving again), and every suspended holder
// resumed this long after that.
constexpr Millis kWatchesBackBudget(60000);
constexpr Millis kResumeBudget(30000);

// Runs o.w5_restart_zk (which restarts ZooKeeper) while every waiter of W5
// waits, then checks the replica's reconnection (scale_restart.cc). Failed
// checks are added to r's violations; false (and *why) if the run cannot
// go on.
bool RestartWhileWaiting(const BenchOptions& o, ScaleState* s,
                         const std::vector<std::string>& lock_paths, ScaleResult* r,
                         std::string* why);

}  // namespace turnstile::bench

#endif  // TURNSTILE_CLIENT_BENCH_SCALE_STATE_H_
