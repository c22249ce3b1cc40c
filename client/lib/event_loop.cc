#include "client/lib/event_loop.h"

#include <pthread.h>

#include <algorithm>
#include <map>
#include <thread>
#include <utility>

#include <grpc/support/time.h>
#include <grpcpp/alarm.h>
#include <grpcpp/completion_queue.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace turnstile::client {

// Shared by the EventLoop and its thread, so a thread left detached by a
// destructor running on it still has what it reads on its way out.
struct EventLoop::State {
  explicit State(std::string thread_name) : name(std::move(thread_name)) {}

  const std::string name;
  grpc::CompletionQueue cq;
  grpc::Alarm alarm;  // wakes the loop; at most one pending (alarm_pending)
  Tag alarm_tag{[](void* self, bool) { static_cast<State*>(self)->AlarmDone(); }, this};

  // Taken by any thread that queues a task, and by the loop's thread
  // between turns; never held while a task or a tag runs. Lock order: the
  // last lock (callers hold their own first: a HoldCore's, a KeepAliver's,
  // an AsyncStream's); nothing is taken under it but gRPC's own.
  absl::Mutex mu;
  // Equal deadlines keep their insertion order (multimap inserts at the end
  // of an equal range): posted tasks run in the order posted.
  std::multimap<Clock::time_point, std::function<void()>> tasks ABSL_GUARDED_BY(mu);
  bool stop ABSL_GUARDED_BY(mu) = false;
  bool started ABSL_GUARDED_BY(mu) = false;
  std::thread thread ABSL_GUARDED_BY(mu);
  std::thread::id thread_id ABSL_GUARDED_BY(mu);
  // In AsyncNext (or about to be), until `sleep_until` at the latest.
  bool sleeping ABSL_GUARDED_BY(mu) = false;
  Clock::time_point sleep_until ABSL_GUARDED_BY(mu);
  bool alarm_pending ABSL_GUARDED_BY(mu) = false;

  void StartLocked(std::shared_ptr<State> self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    started = true;
    thread = std::thread(&State::Run, std::move(self));
    thread_id = thread.get_id();
  }

  // The task just queued is due at `when`: makes the loop look again if it
  // may be asleep until later. The loop's own thread looks before it
  // sleeps.
  void WakeLocked(Clock::time_point when) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!sleeping || when >= sleep_until || alarm_pending) return;
    if (std::this_thread::get_id() == thread_id) return;
    alarm_pending = true;
    // Already due: the alarm completes on the queue within this call.
    alarm.Set(&cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), &alarm_tag);
  }
  void AlarmDone() ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock l(&mu);
    alarm_pending = false;
  }

  static void Run(std::shared_ptr<State> self) {
    State& s = *self;
    pthread_setname_np(pthread_self(), s.name.substr(0, 15).c_str());
    s.mu.Lock();
    for (;;) {
      // Awake. (A task queued between AsyncNext's return and here may set
      // the alarm for nothing: one spurious turn, never a missed one.)
      s.sleeping = false;
      // Due tasks, in deadline order (posted ones first).
      bool have_now = false;
      Clock::time_point now;
      while (!s.stop && !s.tasks.empty()) {
        auto first = s.tasks.begin();
        if (first->first != Clock::time_point::min()) {
          if (!have_now) {
            now = Clock::now();
            have_now = true;
          }
          if (first->first > now) break;
        }
        std::function<void()> task = std::move(first->second);
        s.tasks.erase(first);
        s.mu.Unlock();
        task();
        task = nullptr;  // what it holds is released outside the lock
        s.mu.Lock();
        have_now = false;
      }
      // Then the queue, until the next timer.
      gpr_timespec deadline = gpr_inf_future(GPR_CLOCK_MONOTONIC);
      s.sleep_until = Clock::time_point::max();
      if (!s.stop && !s.tasks.empty()) {
        s.sleep_until = s.tasks.begin()->first;
        const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(
            s.sleep_until - Clock::now());
        deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                gpr_time_from_nanos(std::max<int64_t>(0, wait.count()),
                                                    GPR_TIMESPAN));
      }
      s.sleeping = true;
      s.mu.Unlock();
      void* tag = nullptr;
      bool ok = false;
      const grpc::CompletionQueue::NextStatus status = s.cq.AsyncNext(&tag, &ok, deadline);
      if (status == grpc::CompletionQueue::SHUTDOWN) return;  // stopped and drained
      if (status == grpc::CompletionQueue::GOT_EVENT) {
        Tag* t = static_cast<Tag*>(tag);
        t->run(t->self, ok);
      }
      s.mu.Lock();
    }
  }
};

EventLoop::EventLoop(std::string thread_name)
    : state_(std::make_shared<State>(std::move(thread_name))) {}

EventLoop::~EventLoop() {
  State& s = *state_;
  std::multimap<Clock::time_point, std::function<void()>> dropped;
  std::thread thread;
  bool on_loop_thread;
  bool started;
  {
    absl::MutexLock l(&s.mu);
    s.stop = true;
    dropped.swap(s.tasks);
    thread = std::move(s.thread);
    on_loop_thread = s.thread_id == std::this_thread::get_id();
    started = s.started;
  }
  dropped.clear();
  // No alarm is set from now on; the thread drains what is left and ends.
  s.cq.Shutdown();
  if (!started) {
    void* tag = nullptr;
    bool ok = false;
    while (s.cq.Next(&tag, &ok)) {
    }
    return;
  }
  if (on_loop_thread) {
    thread.detach();
  } else {
    thread.join();
  }
}

void EventLoop::RunAt(Clock::time_point when, std::function<void()> task) {
  State& s = *state_;
  absl::MutexLock l(&s.mu);
  if (s.stop) return;
  s.tasks.emplace(when, std::move(task));
  if (!s.started) {
    s.StartLocked(state_);
    return;
  }
  s.WakeLocked(when);
}

void EventLoop::Post(std::function<void()> task) { RunAt(Clock::time_point::min(), std::move(task)); }

bool EventLoop::InLoopThread() const {
  State& s = *state_;
  absl::MutexLock l(&s.mu);
  return s.thread_id == std::this_thread::get_id();
}

std::shared_ptr<EventLoop> SharedEventLoop() {
  struct Shared {
    absl::Mutex mu;
    std::weak_ptr<EventLoop> loop ABSL_GUARDED_BY(mu);
  };
  static Shared* shared = new Shared;  // never destroyed: used until the process ends
  absl::MutexLock l(&shared->mu);
  std::shared_ptr<EventLoop> loop = shared->loop.lock();
  if (!loop) {
    loop = std::make_shared<EventLoop>("turnstile-cq");
    shared->loop = loop;
  }
  return loop;
}

grpc::CompletionQueue* EventLoop::cq() {
  State& s = *state_;
  absl::MutexLock l(&s.mu);
  if (!s.started && !s.stop) s.StartLocked(state_);
  return &s.cq;
}

}  // namespace turnstile::client
