// WriteBatcher: the rules by which a shard's contender creates (and
// deletes) go to ZooKeeper together, as one multi (issue 39, decision 2).
// A pure queue over (contender id, generation, lock segment): no ZooKeeper,
// no lock of its own; the shard keeps one per kind under its lock and
// unit tests drive it directly (tests/write_batcher_test.cc).
//
// Why it is safe. Every operation of one multi commits in one transaction
// with one zxid, all or nothing. A create's fencing token is its node's
// czxid, which a setData in the same multi returns as its mzxid; so the
// shard adds one setData on a node of its own session (its clock) and
// gives every create of the batch that token.
//
// The rules that keep each lock's tokens strictly increasing and its
// requests in arrival order:
//   - Writes leave in arrival order, and a batch takes at most one write
//     per lock (two creates of one lock would share one czxid).
//   - A lock with a write in a multi in flight sends nothing more until
//     that multi's reply (InFlight/Landed): a failed multi applied nothing
//     and is split and resent one write at a time, in its order, before
//     anything that arrived after it for the same lock.
//   - What a batch skips stays queued, in its order, for the next batch.
//   - A batch of one goes as a plain request (no multi, no setData), and
//     marks nothing in flight: a lone write costs what it did before.
#ifndef TURNSTILE_SERVER_ENGINE_WRITE_BATCHER_H_
#define TURNSTILE_SERVER_ENGINE_WRITE_BATCHER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace turnstile {

class WriteBatcher {
 public:
  struct Write {
    uint64_t id = 0;   // the contender
    uint64_t gen = 0;  // its generation when queued (a stale one is dropped)
    std::string segment;  // its lock
  };

  explicit WriteBatcher(size_t max_batch) : max_batch_(max_batch < 1 ? 1 : max_batch) {}

  void Add(Write w) { queue_.push_back(std::move(w)); }
  bool empty() const { return queue_.empty(); }
  size_t queued() const { return queue_.size(); }

  // The next batch, in arrival order: at most max_batch writes, at most
  // one per lock, none of a lock in flight. Writes `live` refuses are
  // dropped from the queue (the contender ended or moved on); writes
  // skipped for their lock stay queued in their order. Empty when nothing
  // can leave now.
  std::vector<Write> Next(const std::function<bool(const Write&)>& live) {
    std::vector<Write> out;
    std::set<std::string> taken;
    std::deque<Write> kept;
    while (!queue_.empty()) {
      Write w = std::move(queue_.front());
      queue_.pop_front();
      if (!live(w)) continue;
      if (out.size() >= max_batch_ || in_flight_.count(w.segment) > 0 ||
          taken.count(w.segment) > 0) {
        // Later writes of a lock skipped here are skipped too (its segment
        // stays taken or in flight), so each lock keeps its order.
        kept.push_back(std::move(w));
        continue;
      }
      taken.insert(w.segment);
      out.push_back(std::move(w));
    }
    queue_ = std::move(kept);
    return out;
  }

  // `batch` (two writes or more) went as one multi: its locks send nothing
  // more until Landed(batch).
  void InFlight(const std::vector<Write>& batch) {
    for (const Write& w : batch) in_flight_.insert(w.segment);
  }
  void Landed(const std::vector<Write>& batch) {
    for (const Write& w : batch) in_flight_.erase(w.segment);
  }
  bool in_flight(const std::string& segment) const { return in_flight_.count(segment) > 0; }

  // Forgets everything (the session expired: every write is re-queued by
  // its contender's own recovery, and no reply of the old session counts).
  void Clear() {
    queue_.clear();
    in_flight_.clear();
  }

 private:
  const size_t max_batch_;
  std::deque<Write> queue_;
  std::set<std::string> in_flight_;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ENGINE_WRITE_BATCHER_H_
