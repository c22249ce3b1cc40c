// Gather: one fan-out's answers, each in its own slot; the last answer to
// arrive completes the call. Used where one call becomes several reads or
// several shards' work (Describe's and CheckToken's reads, List's batches,
// KeepAlive's leases).
//
// No lock: each slot is written once, by its own answer, before the
// count-down; the count-down is acquire-release, so the answer that brings
// it to zero sees every slot and alone runs `done`, on its own thread (a
// shard's loop, when the answers come from its session). Answers may come
// from several threads at once (several shards' loops).
#ifndef TURNSTILE_SERVER_ENGINE_GATHER_H_
#define TURNSTILE_SERVER_ENGINE_GATHER_H_

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace turnstile {

template <typename T>
class Gather {
 public:
  using Done = std::function<void(std::vector<T>)>;

  // A fan-out of `n` answers (n > 0); `done` gets them in slot order.
  static std::shared_ptr<Gather> New(size_t n, Done done) {
    return std::shared_ptr<Gather>(new Gather(n, std::move(done)));
  }

  // Slot `i`'s answer: exactly once per slot. The last one runs `done`.
  void Answer(size_t i, T value) {
    if (i >= n_) Die("an answer for a slot beyond the fan-out");
    if (left_.load(std::memory_order_relaxed) == 0) Die("more answers than the fan-out");
    slots_[i] = std::move(value);
    const size_t before = left_.fetch_sub(1, std::memory_order_acq_rel);
    if (before == 0) Die("more answers than the fan-out");
    if (before == 1) {
      Done done = std::move(done_);
      done(std::move(slots_));
    }
  }

  size_t size() const { return n_; }

 private:
  Gather(size_t n, Done done) : n_(n), slots_(n), left_(n), done_(std::move(done)) {
    if (n == 0) Die("a fan-out of no answers");
  }
  [[noreturn]] static void Die(const char* what) {
    std::fprintf(stderr, "turnstile Gather: %s\n", what);
    std::abort();
  }

  const size_t n_;
  std::vector<T> slots_;
  std::atomic<size_t> left_;
  Done done_;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ENGINE_GATHER_H_
