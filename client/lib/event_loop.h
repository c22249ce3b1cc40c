// EventLoop: the one thread of its own a turnstile Client runs on.
//
// It runs tasks one at a time, outside its lock, in deadline order: tasks
// posted to run at once (in the order posted), then timers as they fall due.
// Other threads (the caller's, gRPC's callback threads) only queue work to it,
// so a hold costs a timer entry, never a thread. The thread starts with the
// first task and ends when the EventLoop is destroyed; tasks not run by then
// are dropped. Thread-safe.
//
// TimerSlot: at most one live timer per owner (a hold's watchdog, the
// KeepAlive schedule). Moving a deadline later costs nothing: the armed timer
// fires first and re-arms; moving it earlier arms a new one and the old one's
// fire is ignored.
//
// Internal to client/lib; not part of the public API.
#ifndef TURNSTILE_CLIENT_LIB_EVENT_LOOP_H_
#define TURNSTILE_CLIENT_LIB_EVENT_LOOP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace turnstile::client {

class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;

  EventLoop();
  // Stops the thread after the task it runs, and joins it; detaches it when
  // called on the loop's own thread (a task dropped the last reference).
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs `task` at `when` (at once if past). Wakes the thread only when
  // `when` is earlier than everything already queued.
  void RunAt(Clock::time_point when, std::function<void()> task);
  // Runs `task` as soon as possible, after the tasks posted before it.
  void Post(std::function<void()> task);
  // True on the loop's thread: code there must not wait for anything the
  // loop itself would have to run.
  bool InLoopThread() const;

 private:
  struct State;
  const std::shared_ptr<State> state_;
};

// REQUIRES: every call under the owner's lock (TimerSlot has none).
class TimerSlot {
 public:
  using Clock = EventLoop::Clock;

  // The generation to schedule a timer at `when` with, or 0 when the armed
  // timer fires no later (nothing to schedule).
  uint64_t Arm(Clock::time_point when) {
    if (armed_ && at_ <= when) return 0;
    armed_ = true;
    at_ = when;
    return ++generation_;
  }
  // Whether a timer armed with `generation` is the live one; it is then
  // disarmed (the owner re-arms for its next deadline).
  bool Fire(uint64_t generation) {
    if (!armed_ || generation != generation_) return false;
    armed_ = false;
    return true;
  }

 private:
  bool armed_ = false;
  Clock::time_point at_;
  uint64_t generation_ = 0;
};

}  // namespace turnstile::client

#endif  // TURNSTILE_CLIENT_LIB_EVENT_LOOP_H_
