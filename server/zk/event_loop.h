// EventLoop: one thread that polls one outside file descriptor (a
// ZooKeeper handle's socket), an eventfd to be woken, and a heap of timers;
// and runs work posted to it from any thread, in the order it was posted.
//
// This is the loop of a shard (one ZooKeeper session of the pool and the
// locks that live on it): what runs on it needs no lock against other work
// of the same loop. ZkClientSession owns one and drives the C client on it;
// its completions and watchers run here, and so do the engine's timers
// (wait timeouts, leases, suspensions, heartbeats) of the shard on that
// session, so a timer that fires needs no hop to another thread.
//
// Threading: Post, Wake, Schedule and Cancel from any thread. Everything
// a Source does runs on the loop thread only. Stop from any thread but the
// loop's.
//
// After Stop and RunQueued the loop has no thread, but work posted to it
// still runs exactly once, in order, one at a time: on the posting thread,
// or on the thread already running the loop's queue. So what is the loop's alone (a
// shard's state) stays single-threaded through a shutdown, and a late call
// is still answered. InLoopThread is true on whichever thread runs the
// loop's work.
//
// Locks: mu_ (the posted work and the timers) is a leaf; it is never held
// while work, timers or the source run.
#ifndef TURNSTILE_SERVER_ZK_EVENT_LOOP_H_
#define TURNSTILE_SERVER_ZK_EVENT_LOOP_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace turnstile {

class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;
  using TimerId = uint64_t;  // 0 is never a valid id

  // What the loop polls besides its eventfd, asked afresh before every poll.
  struct Interest {
    int fd = -1;            // none
    short events = 0;       // POLLIN | POLLOUT
    int timeout_ms = -1;    // the source's own deadline (-1: none)
  };
  class Source {
   public:
    virtual ~Source() = default;
    // On the loop, before each poll.
    virtual Interest Prepare() = 0;
    // On the loop, after each poll, whether or not the fd was ready
    // (revents 0): a source may have due work of its own (pings).
    virtual void Dispatch(short revents) = 0;
  };

  EventLoop();
  ~EventLoop();  // Stop()
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Starts the thread; `source` (may be null) must outlive the loop.
  // `name` (up to 15 bytes) names the thread for top -H, perf and /proc.
  void Start(Source* source, const std::string& name = "ts-loop");
  // Ends the thread after the work in hand and joins it. Work still
  // queued stays queued (RunQueued); pending timers are dropped. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // After Stop, on the caller's thread: runs the queued work (which may
  // queue more) until none is left. Each posted function runs exactly once.
  // From then on, Post runs work on the caller's thread (see above).
  void RunQueued() ABSL_LOCKS_EXCLUDED(mu_);

  // Queues `fn`; from another thread, wakes the loop if it may be asleep.
  void Post(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `fn` now if this thread may run the loop's work (OwnedHere) and
  // no work posted before waits to run, else posts it: how a user of the
  // loop enters it from any thread, in the order of the calls. (On the
  // loop's thread, e.g. a gRPC callback run inline there, work posted
  // earlier from another thread still runs first.)
  void Run(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);
  // Run, and returns once `fn` has run (so never from work another thread
  // runs for this loop while it waits on the caller).
  void RunAndWait(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);
  void Wake();

  // Runs `fn` on the loop at `when` (or soon after) unless cancelled
  // first; after Stop, never. Wakes a sleeping loop only for a timer due
  // before it would look anyway: the usual cycle (a wait timeout scheduled,
  // cancelled at the grant, the next one a little later) costs no wake-up.
  TimerId Schedule(Clock::time_point when, std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);
  TimerId ScheduleAfter(Clock::duration d, std::function<void()> fn) {
    return Schedule(Clock::now() + d, std::move(fn));
  }
  // A no-op for a timer that ran, was cancelled or never was (0). A timer
  // already running is not waited for, and a cancel never wakes the loop.
  void Cancel(TimerId id) ABSL_LOCKS_EXCLUDED(mu_);
  // Timers scheduled and not yet run or cancelled (tests: nothing leaks).
  size_t timers() const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether this thread runs the loop's work now: the loop's thread, or
  // after Stop the thread running its queue.
  bool InLoopThread() const { return current_ == this; }
  // Whether work of this loop may run here without a hop: on the thread
  // running its work, or when none will (not started, or stopped and
  // RunQueued not called yet: then what it posts stays queued). After
  // RunQueued, work runs in place only through Post (which queues what it
  // posts behind it). For checks: a caller off the loop while it runs is a
  // race.
  bool OwnedHere() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();
  // Runs the queue on this thread until it is empty, unless another
  // thread already does (it runs ours too).
  void RunQueuedHere() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the timers that are due.
  void RunDueTimers() ABSL_LOCKS_EXCLUDED(mu_);
  // On the thread running the loop's work: nothing posted waits to run
  // (neither in the queue nor later in the batch now running).
  bool NothingPostedWaits() const ABSL_LOCKS_EXCLUDED(mu_);
  // Milliseconds until the earliest timer (-1: none).
  int UntilFirstTimer(Clock::time_point now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Source* source_ = nullptr;
  int wake_fd_ = -1;
  std::thread thread_;
  // The loop whose work this thread runs now (null: none).
  static thread_local const EventLoop* current_;
  // Work of the batch taken from the queue not started yet: the running
  // thread's own (read only where InLoopThread).
  size_t batch_left_ = 0;

  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool drained_ ABSL_GUARDED_BY(mu_) = false;  // RunQueued ran: Post runs work in place
  bool running_queued_ ABSL_GUARDED_BY(mu_) = false;  // a thread runs the queue after Stop
  bool joined_ ABSL_GUARDED_BY(mu_) = false;  // Stop joined the thread
  std::map<std::pair<Clock::time_point, TimerId>, std::function<void()>> timers_
      ABSL_GUARDED_BY(mu_);
  std::map<TimerId, Clock::time_point> timer_index_ ABSL_GUARDED_BY(mu_);
  TimerId next_timer_ ABSL_GUARDED_BY(mu_) = 0;
  // When the sleeping loop looks at its timers anyway (min: it is awake
  // and will look before it sleeps; max: it sleeps until woken).
  Clock::time_point wake_at_ ABSL_GUARDED_BY(mu_) = Clock::time_point::min();
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ZK_EVENT_LOOP_H_
