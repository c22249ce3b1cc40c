// LockQueue: one replica's ordered view of one lock's contenders, shared by
// all of the replica's contenders on that lock.
//
// Each local contender used to keep its own copy of everyone ahead of it, so
// memory grew with the square of a lock's local queue and every departure
// walked every local waiter. One view per lock replaces those copies: a
// departure is one erase, and only the contender directly behind the
// departed node has anything to re-decide (the rule is in ordering.h).
//
// Why one view is enough (ZooKeeper answers one session's requests and
// delivers its watch events in order): a listing sent after a contender's
// create contains every node ahead of that contender, and nodes ahead can
// only disappear, never appear. Everything the engine learns about
// departures (delete replies, watch events, reads that find nothing)
// arrives in the same order as listings, so the view is "the latest
// listing, minus what this replica saw leave since". That is exact for this
// replica's own contenders, but not across replicas: another replica's
// node that left unseen (its contenders handed over among themselves,
// watched by nobody here) stays in the view, a superset of the real queue.
// Decisions stay safe (a stale entry only blocks), and a read that finds a
// blocker gone starts a probe of the other replicas' entries ahead
// (EngineShard::Waiters::Advance, server/engine/shard_queue.cc). Contenders
// created after the latest listing keep their own entry until a later
// listing covers them.
//
// Pure data, no I/O; not thread-safe (the engine's mutex guards it).
#ifndef TURNSTILE_SERVER_RECIPE_LOCK_QUEUE_H_
#define TURNSTILE_SERVER_RECIPE_LOCK_QUEUE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "server/recipe/lock_name.h"

namespace turnstile {

// Queue order of two contender sequences: the parsed 10-digit suffix (the
// parent's cversion), a signed 32-bit counter that wraps from 2147483647
// to -2147483648. Serial-number arithmetic (RFC 1982): `a` comes first if
// it is less than 2^31 behind `b`, so the order is right across the wrap
// for any queue spanning fewer than 2^31 creates (a live one spans far
// fewer).
inline bool SequenceBefore(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b)) < 0;
}

class LockQueue {
 public:
  struct Entry {
    std::string node;
    ContenderKind kind = ContenderKind::kExclusive;
    uint64_t local_id = 0;  // this replica's contender id, 0 = another replica's
    int32_t max_holders = 0;  // kSemaphore: its N (from the node name)
  };
  // Wrap-aware sequence order (a live queue spans far less than 2^30).
  struct SeqLess {
    bool operator()(int32_t a, int32_t b) const { return SequenceBefore(a, b); }
  };
  using Map = std::map<int32_t, Entry, SeqLess>;

  // Replaces the view with a listing (names that are not contender names are
  // ignored). `local_id(node)` names this replica's contender for a node (0
  // if none). Returns the entries the old view had that the listing lacks and
  // that `keep` says to keep anyway (contenders created after the listing
  // was sent): they are put back.
  void ReplaceWith(const std::vector<std::string>& children,
                   const std::function<uint64_t(const std::string&)>& local_id,
                   const std::function<bool(const Entry&)>& keep);

  void Insert(int32_t seq, Entry e);
  // Removes `seq` if it holds `node`; true if it did.
  bool Erase(int32_t seq, const std::string& node);
  // Removes every entry ahead of `seq` except this replica's own contenders
  // (a granted mutex proves them gone); returns how many went.
  size_t EraseRemoteBefore(int32_t seq);

  bool Contains(int32_t seq, const std::string& node) const;
  // The entry at `seq`; nullptr if none.
  const Entry* Find(int32_t seq) const {
    auto it = entries_.find(seq);
    return it == entries_.end() ? nullptr : &it->second;
  }
  // The entry directly ahead of / behind `seq` (which need not be present);
  // nullptr if none.
  const Entry* Ahead(int32_t seq) const;
  const Entry* Behind(int32_t seq) const;
  // The nearest entry ahead of `seq` that is not shared (exclusive, or a
  // semaphore's: a reader never passes either); nullptr if none. O(number
  // of shared entries in between).
  const Entry* NearestExclusiveAhead(int32_t seq) const;
  // Calls fn(seq, entry) for the entries ahead of `seq`, nearest first,
  // until fn returns false.
  void ForAhead(int32_t seq, const std::function<bool(int32_t, const Entry&)>& fn) const;
  // Whether some entry disagrees with a contender of `kind` (and, for a
  // semaphore, `max_holders`): a semaphore's entry with another N, or an
  // entry of the other family (semaphore vs exclusive/shared). O(1): the
  // view counts its entries by family and N.
  bool AnyDisagreeing(ContenderKind kind, int32_t max_holders) const;
  // Calls fn(seq, entry) for the entries behind `seq` in queue order until
  // fn returns false.
  void ForBehind(int32_t seq, const std::function<bool(int32_t, const Entry&)>& fn) const;
  // Number of entries ahead of `seq`. O(position).
  int64_t CountAhead(int32_t seq) const;

  // Calls fn(rank, seq, entry) for the first `limit` entries in queue order
  // (rank 0 = front).
  void ForFront(size_t limit, const std::function<void(int64_t, int32_t, const Entry&)>& fn) const;

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  void Clear() {
    entries_.clear();
    semaphores_by_n_.clear();
    others_ = 0;
  }

 private:
  void Count(const Entry& e, int delta);
  Map entries_;
  // Entries by family: semaphore entries per N, and the others.
  std::map<int32_t, int64_t> semaphores_by_n_;
  int64_t others_ = 0;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RECIPE_LOCK_QUEUE_H_
