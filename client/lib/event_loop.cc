#include "client/lib/event_loop.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace turnstile::client {

// Shared by the EventLoop and its thread, so a thread left detached by a
// destructor running on it still has what it reads on its way out.
struct EventLoop::State {
  std::mutex mu;
  std::condition_variable cv;
  // Equal deadlines keep their insertion order (multimap inserts at the end
  // of an equal range): posted tasks run in the order posted.
  std::multimap<Clock::time_point, std::function<void()>> tasks;  // GUARDED_BY(mu)
  bool stop = false;                                               // GUARDED_BY(mu)
  std::thread thread;                                              // GUARDED_BY(mu)
  std::thread::id thread_id;                                       // GUARDED_BY(mu)

  static void Run(std::shared_ptr<State> self) {
    State& s = *self;
    std::unique_lock<std::mutex> l(s.mu);
    while (!s.stop) {
      if (s.tasks.empty()) {
        s.cv.wait(l);
        continue;
      }
      auto first = s.tasks.begin();
      // A copy: wait_until reads the deadline again after waking, when the
      // destructor may have dropped the task that held it.
      const Clock::time_point due = first->first;
      if (due > Clock::now()) {
        s.cv.wait_until(l, due);
        continue;
      }
      std::function<void()> task = std::move(first->second);
      s.tasks.erase(first);
      l.unlock();
      task();
      task = nullptr;  // what it holds is released outside the lock
      l.lock();
    }
  }
};

EventLoop::EventLoop() : state_(std::make_shared<State>()) {}

EventLoop::~EventLoop() {
  std::multimap<Clock::time_point, std::function<void()>> dropped;
  std::thread thread;
  bool on_loop_thread;
  {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->stop = true;
    dropped.swap(state_->tasks);
    thread = std::move(state_->thread);
    on_loop_thread = state_->thread_id == std::this_thread::get_id();
  }
  state_->cv.notify_all();
  dropped.clear();
  if (!thread.joinable()) return;
  if (on_loop_thread) {
    thread.detach();
  } else {
    thread.join();
  }
}

void EventLoop::RunAt(Clock::time_point when, std::function<void()> task) {
  std::lock_guard<std::mutex> l(state_->mu);
  if (state_->stop) return;
  const bool earliest = state_->tasks.empty() || when < state_->tasks.begin()->first;
  state_->tasks.emplace(when, std::move(task));
  if (!state_->thread.joinable()) {
    state_->thread = std::thread(&State::Run, state_);
    state_->thread_id = state_->thread.get_id();
    return;
  }
  // A later deadline is found by the wait already under way.
  if (earliest) state_->cv.notify_one();
}

void EventLoop::Post(std::function<void()> task) { RunAt(Clock::time_point::min(), std::move(task)); }

bool EventLoop::InLoopThread() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->thread_id == std::this_thread::get_id();
}

}  // namespace turnstile::client
