// SessionSlot: the engine's bookkeeping for one ZooKeeper session of its
// pool: whether it is connected and bootstrapped, its epoch (bumped on
// expiry, so replies from an expired session are recognized), when ZooKeeper
// last certainly heard from it (the base of every SUSPENDED safe_for), its
// heartbeat and suspend timers, and its watch budget.
//
// Why a pool: ZooKeeper's C client re-sends all of a session's watches in
// one SetWatches packet on reconnect, and the server refuses a packet over
// jute.maxbuffer (1 MiB by default), which breaks the session. The budget
// (--max-watch-bytes) therefore applies per session; a replica that must
// hold more waiters spreads its locks over several sessions
// (--zk-sessions). Every lock lives on one session of the pool, chosen by a
// hash of its name, so ZooKeeper's per-session FIFO order still covers all
// of this replica's requests on one lock (the pipelined listing and the
// local handoff rely on it), and every failure rule of SPEC §4 (SUSPENDED,
// LOST on expiry, re-queue of waiters) applies to the locks of the session
// that failed, and only to them.
#ifndef TURNSTILE_SERVER_ENGINE_SESSION_SLOT_H_
#define TURNSTILE_SERVER_ENGINE_SESSION_SLOT_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include "server/zk/event_loop.h"
#include "server/zk/zk_session.h"

namespace turnstile {

// How long holds stay certainly valid, from `now`, for a session that
// ZooKeeper's leader certainly heard from at `last_alive` (a sync sent then
// succeeded): the earliest possible expiry, last_alive + timeout, minus a
// margin for what the replica cannot see:
// - the relay lag, timeout / 4: a follower tells the leader of a session's
//   activity only in its next ping reply (every half tick), and a heartbeat
//   (sync) is sent every tenth of the timeout, so the leader's latest news
//   of the session may be older than the latest sync by max(heartbeat
//   interval, tick / 2). With ZooKeeper's minimum timeout of 2 ticks, tick
//   / 2 is at most timeout / 4, and the interval (timeout / 10; it was
//   timeout / 5) is below that: the term stays timeout / 4 for any interval
//   up to timeout / 4, and syncing more often does not shrink it, because
//   the tick does not depend on us;
// - the last heartbeat's round trip (the contact may be older than its
//   reply suggests);
// - clock-rate drift between this host and ZooKeeper's and the time the
//   event takes to reach the client: max(200 ms, 2 % of the timeout).
// Never negative.
inline std::chrono::milliseconds SafeForFrom(EventLoop::Clock::time_point last_alive,
                                             std::chrono::milliseconds timeout,
                                             std::chrono::milliseconds heartbeat_rtt,
                                             EventLoop::Clock::time_point now) {
  const std::chrono::milliseconds margin =
      timeout / 4 + heartbeat_rtt + std::max(std::chrono::milliseconds(200), timeout / 50);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      last_alive + timeout - margin - now);
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}

struct SessionSlot {
  using Clock = EventLoop::Clock;

  size_t index = 0;
  ZkSession* zk = nullptr;
  bool connected = false;
  bool bootstrapped = false;  // the root exists on this session
  // The session's clock node (EngineShard::EnsureClock), once made: a
  // batch of creates sets its data to learn the batch's zxid. Empty: none
  // (creates go one by one).
  std::string clock_path;
  // Connected, but the heartbeat in flight has been unanswered for too
  // long (DoubtAfter in shard_liveness.cc), or none was confirmed for
  // kDoubtAfterHeartbeats intervals: the connection may be cut, or the
  // server this session talks to cut off from the quorum while it still
  // answers reads. Holds are SUSPENDED exactly as on a disconnection until
  // a heartbeat succeeds.
  bool in_doubt = false;
  bool heartbeat_in_flight = false;
  Clock::time_point heartbeat_sent_at{};  // of the heartbeat in flight
  uint64_t epoch = 0;         // bumped on expiry
  // ZooKeeper saw this session alive at or after this time (a read sent
  // then succeeded): its expiry is no earlier than this + session timeout.
  Clock::time_point last_alive{};
  std::chrono::milliseconds heartbeat_rtt{0};  // the last heartbeat's round trip not through a doubt
  EventLoop::TimerId suspend_timer = 0;
  EventLoop::TimerId heartbeat_timer = 0;
  // Sum of the path lengths this session's contenders may watch.
  size_t watched_path_bytes = 0;
  // Those of this session's contenders that hold (kHeld, kept by
  // EngineShard::Retally): a heartbeat's refresh of the holders or a
  // suspension visits these, not every waiter. (All of the session's
  // contenders are its shard's: EngineShard::AllContenders.)
  std::set<uint64_t> holders;

  bool ready() const { return connected && bootstrapped; }
  // Whether what this session reports now can be acted on: contact is not
  // in doubt and the session cannot have expired yet. After a long pause
  // (SIGSTOP, a stall) the events waiting in the socket may be the
  // session's own expiry seen from inside (its nodes deleted).
  bool trusted(Clock::time_point now) const {
    return connected && !in_doubt && SafeFor(now).count() > 0;
  }
  // How long holds on this session stay certainly valid from `now`.
  std::chrono::milliseconds SafeFor(Clock::time_point now) const {
    return SafeForFrom(last_alive, zk->session_timeout(), heartbeat_rtt, now);
  }
};

// The session of a pool of `pool` that serves the lock whose znode segment
// is `segment`: FNV-1a of the segment, so it is stable across runs and
// platforms (tests and operators can tell which session a lock uses).
inline size_t SessionIndexFor(std::string_view segment, size_t pool) {
  if (pool <= 1) return 0;
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : segment) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return static_cast<size_t>(h % pool);
}

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ENGINE_SESSION_SLOT_H_
