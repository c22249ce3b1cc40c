#include "server/zk/event_loop.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/notification.h"

namespace turnstile {

namespace {

// Always on (a thread-id comparison): a loop's state touched from another
// thread is a race the tests must catch, not a debug-build nicety.
void CheckOnLoop(bool on_loop, const char* what) {
  if (on_loop) return;
  std::fprintf(stderr, "turnstile: EventLoop::%s called off its loop thread\n", what);
  std::abort();
}

}  // namespace

thread_local const EventLoop* EventLoop::current_ = nullptr;

EventLoop::EventLoop() { wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

EventLoop::~EventLoop() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void EventLoop::Start(Source* source, const std::string& name) {
  source_ = source;
  absl::MutexLock l(&mu_);
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
  pthread_setname_np(thread_.native_handle(), name.substr(0, 15).c_str());
}

void EventLoop::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  CheckOnLoop(!InLoopThread(), "Stop (from its own thread)");
  Wake();
  if (thread_.joinable()) thread_.join();
  absl::MutexLock l(&mu_);
  joined_ = true;
  timers_.clear();
  timer_index_.clear();
}

void EventLoop::RunQueued() {
  {
    absl::MutexLock l(&mu_);
    drained_ = true;
  }
  RunQueuedHere();
}

void EventLoop::RunQueuedHere() {
  {
    absl::MutexLock l(&mu_);
    if (running_queued_) return;  // that thread runs ours too
    running_queued_ = true;
  }
  const EventLoop* outer = current_;
  current_ = this;
  for (;;) {
    std::deque<std::function<void()>> left;
    {
      absl::MutexLock l(&mu_);
      left.swap(queue_);
      if (left.empty()) {
        running_queued_ = false;
        break;
      }
    }
    batch_left_ = left.size();
    for (auto& fn : left) {
      --batch_left_;
      fn();
    }
  }
  current_ = outer;
}

bool EventLoop::OwnedHere() const {
  if (InLoopThread()) return true;
  absl::MutexLock l(&mu_);
  return !drained_ && (!started_ || joined_);
}

void EventLoop::Post(std::function<void()> fn) {
  bool wake;
  bool here;
  {
    absl::MutexLock l(&mu_);
    // The loop looks at its queue before it polls: only a sleeping loop
    // needs the eventfd, and only the first of a burst writes it.
    wake = queue_.empty() && !InLoopThread();
    queue_.push_back(std::move(fn));
    here = drained_ && !running_queued_;
  }
  if (here) {
    RunQueuedHere();
  } else if (wake) {
    Wake();
  }
}

bool EventLoop::NothingPostedWaits() const {
  if (batch_left_ > 0) return false;
  absl::MutexLock l(&mu_);
  return queue_.empty();
}

void EventLoop::Run(std::function<void()> fn) {
  // On the loop's thread, in place only when no posted work waits: work
  // posted before must not be overtaken (an Abandon run in place while its
  // stream's Open is still queued would leave the contender behind).
  if (InLoopThread() ? NothingPostedWaits() : OwnedHere()) {
    fn();
  } else {
    Post(std::move(fn));
  }
}

void EventLoop::RunAndWait(std::function<void()> fn) {
  if (OwnedHere()) return fn();
  absl::Notification done;
  Post([&fn, &done] {
    fn();
    done.Notify();
  });
  done.WaitForNotification();
}

void EventLoop::Wake() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
}

EventLoop::TimerId EventLoop::Schedule(Clock::time_point when, std::function<void()> fn) {
  bool wake;
  TimerId id;
  {
    absl::MutexLock l(&mu_);
    id = ++next_timer_;
    if (stop_) return id;
    timers_.emplace(std::make_pair(when, id), std::move(fn));
    timer_index_.emplace(id, when);
    wake = when < wake_at_;
  }
  if (wake) Wake();
  return id;
}

void EventLoop::Cancel(TimerId id) {
  absl::MutexLock l(&mu_);
  auto it = timer_index_.find(id);
  if (it == timer_index_.end()) return;
  timers_.erase(std::make_pair(it->second, id));
  timer_index_.erase(it);
}

size_t EventLoop::timers() const {
  absl::MutexLock l(&mu_);
  return timers_.size();
}

int EventLoop::UntilFirstTimer(Clock::time_point now) const {
  if (timers_.empty()) return -1;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(timers_.begin()->first.first - now).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT32_MAX));
}

void EventLoop::RunDueTimers() {
  for (;;) {
    std::function<void()> fn;
    {
      absl::MutexLock l(&mu_);
      if (stop_ || timers_.empty()) return;
      auto first = timers_.begin();
      if (first->first.first > Clock::now()) return;
      fn = std::move(first->second);
      timer_index_.erase(first->first.second);
      timers_.erase(first);
    }
    fn();  // may add or cancel timers
  }
}

void EventLoop::Loop() {
  current_ = this;
  std::deque<std::function<void()>> work;
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (stop_) return;
      work.swap(queue_);
    }
    batch_left_ = work.size();
    for (auto& fn : work) {
      --batch_left_;
      fn();
    }
    work.clear();
    RunDueTimers();
    int timeout_ms = -1;
    struct pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {-1, 0, 0}};
    nfds_t nfds = 1;
    if (source_ != nullptr) {
      const Interest in = source_->Prepare();
      if (in.fd >= 0) {
        fds[1].fd = in.fd;
        fds[1].events = in.events;
        nfds = 2;
      }
      timeout_ms = in.timeout_ms;
    }
    {
      absl::MutexLock l(&mu_);
      // The earliest timer under the same lock that publishes wake_at_: a
      // timer scheduled from another thread is either seen here or wakes
      // the loop (Schedule).
      const Clock::time_point now = Clock::now();
      const int timer_ms = UntilFirstTimer(now);
      if (timer_ms >= 0) timeout_ms = timeout_ms < 0 ? timer_ms : std::min(timeout_ms, timer_ms);
      if (!queue_.empty() || stop_) timeout_ms = 0;  // queued by work, a timer or the source
      wake_at_ = timeout_ms < 0 ? Clock::time_point::max()
                                : now + std::chrono::milliseconds(timeout_ms);
    }
    const int n = poll(fds, nfds, timeout_ms);
    {
      absl::MutexLock l(&mu_);
      wake_at_ = Clock::time_point::min();  // awake: it looks before it sleeps
    }
    if (n > 0 && (fds[0].revents & POLLIN)) {
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof(count));
    }
    if (source_ != nullptr) source_->Dispatch(nfds == 2 ? fds[1].revents : 0);
  }
}

}  // namespace turnstile
