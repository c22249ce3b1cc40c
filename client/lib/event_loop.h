// EventLoop: a thread that is a gRPC poller and runs timers and tasks. The
// client library's streams' operations go to the loop's completion queue
// (cq()), and the loop completes them. Every Client of a process shares one
// (SharedEventLoop), and so does the bench.
//
// Why a completion queue and not gRPC's callback API: Debian's gRPC 1.51
// runs callback reactors on two internal "nexting" threads that hand the
// epoll poller to each other on every event (a futex wake and a context
// switch each), and any callback call in a process brings them. Here one
// thread polls and runs everything: an incoming message costs one wake-up.
//
// Why one per process and not one per Client: gRPC's poller (epoll1) has one
// epoll set per process and one polling thread at a time; a thread leaving
// it with an event for its own queue wakes another waiting poller, and an
// event for another thread's queue wakes that thread. Every loop thread
// more is a hand-off per event. Measured with one Client per client thread
// (as the peer benchmark's driver does), 16 threads on one lock: 0.64 ms of
// CPU and 34 context switches per cycle in the process with the callback
// API, 0.71 ms and 48 with a loop per Client, 0.53 ms and 34 with one loop;
// 32 threads on 32 locks: 0.17 ms and 5.2, 0.22 ms and 13.4, 0.15 ms and
// 4.8.
//
// The thread runs, one at a time and never under the loop's lock: the
// completions of the operations started on cq() (each with a Tag* as its
// gRPC tag), tasks posted to run at once (in the order posted), and timers
// as they fall due. It sleeps in CompletionQueue::AsyncNext until the
// earliest timer; another thread that queues a task due earlier than that
// wakes it with a grpc::Alarm on the same queue (one at a time, and only
// when the loop may be asleep). So a hold costs a timer entry and the
// operations of its stream, never a thread.
//
// The thread starts with the first task or the first use of cq(), and ends
// when the EventLoop is destroyed, which shuts the queue down: nothing may
// be pending on it then but the loop's own alarm (keep the EventLoop alive
// while a call started on cq() has not ended). Tasks not run by then are
// dropped. Thread-safe.
//
// TimerSlot: at most one live timer per owner (a hold's watchdog, the
// KeepAlive schedule). Moving a deadline later costs nothing: the armed timer
// fires first and re-arms; moving it earlier arms a new one and the old one's
// fire is ignored.
//
// Internal to turnstile (the client library and the bench); not part of the
// public API.
#ifndef TURNSTILE_CLIENT_LIB_EVENT_LOOP_H_
#define TURNSTILE_CLIENT_LIB_EVENT_LOOP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace grpc {
class CompletionQueue;
}  // namespace grpc

namespace turnstile::client {

// A completion-queue tag: a function and its object, so that completing an
// operation costs no allocation. Operations started on EventLoop::cq() must
// pass a Tag* as their tag.
struct Tag {
  void (*run)(void* self, bool ok) = nullptr;
  void* self = nullptr;
};
template <typename T, void (T::*F)(bool)>
Tag MakeTag(T* t) {
  return Tag{[](void* self, bool ok) { (static_cast<T*>(self)->*F)(ok); }, t};
}

class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;

  // `thread_name`: the loop thread's name (at most 15 characters).
  explicit EventLoop(std::string thread_name = "turnstile-loop");
  // Shuts the queue down and joins the thread, once it drained the queue;
  // detaches it when called on the loop's own thread (a tag or a task
  // dropped the last reference).
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs `task` at `when` (at once if past). Wakes the thread only when it
  // may be asleep until later than `when`.
  void RunAt(Clock::time_point when, std::function<void()> task);
  // Runs `task` as soon as possible, after the tasks posted before it.
  void Post(std::function<void()> task);
  // True on the loop's thread: code there must not wait for anything the
  // loop itself would have to run.
  bool InLoopThread() const;
  // The queue the loop polls (and the thread started).
  grpc::CompletionQueue* cq();

 private:
  struct State;
  const std::shared_ptr<State> state_;
};

// The loop every Client of this process uses ("turnstile-cq"): created
// with the first, ended (its thread joined) when the last user lets go.
std::shared_ptr<EventLoop> SharedEventLoop();

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
