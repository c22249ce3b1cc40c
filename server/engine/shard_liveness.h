// EngineShard::Liveness: what the shard knows of its ZooKeeper session's
// life and what each change means for its contenders (SPEC §4). A connect
// bootstraps the root and resumes suspended holders once a read shows their
// node; a disconnect or a heartbeat in doubt suspends them, with the safe
// time left, and loses them when it runs out; an expiry loses the holders
// and queues the waiters again on the new session. The heartbeat (a sync
// every tenth of the session timeout) tracks when ZooKeeper's leader last
// certainly heard from the session, the base of every safe_for; whether
// the shard serves follows from all of it.
//
// A part of its shard, as EngineShard::Writes is (shard_writes.h): state of
// its own (whether the shard serves as last told, and the listeners), no
// lock, and every method takes the shard and REQUIRES its loop role, so
// -Wthread-safety checks the calls both ways against one capability. The
// slot (SessionSlot, session_slot.h) stays the shard's: contenders point
// at it. Internal to server/engine/.
#ifndef TURNSTILE_SERVER_ENGINE_SHARD_LIVENESS_H_
#define TURNSTILE_SERVER_ENGINE_SHARD_LIVENESS_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "server/engine/engine_shard.h"
#include "server/engine/session_slot.h"

namespace turnstile {

class EngineShard::Liveness {
 public:
  // The session's event `e`, in a section on the shard's loop.
  void OnSessionEvent(EngineShard* s, SessionSlot* slot, SessionEvent e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Serving is all sessions ready, none in doubt, not draining: tells the
  // listener when that changes.
  void UpdateServing(EngineShard* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // The listener hears the current state at once, then every change.
  void SetServingListener(EngineShard* s, std::function<void(bool)> listener)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void AddSessionListener(EngineShard* s, std::function<void(size_t, SessionEvent)> listener)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void ClearListeners(EngineShard* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);

  // Sends a sync (unless one is in flight): its success proves the leader
  // heard from the session after it was sent.
  void SendHeartbeat(EngineShard* s, SessionSlot* slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Whether `c`'s grant may be announced now (contact trusted); otherwise
  // it waits, stalled, for a heartbeat to confirm contact.
  bool MayAnnounce(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Why a holder's node is gone when its deletion is seen: SESSION_EXPIRED
  // if the session may have expired by now (the replica was paused or cut
  // off past the safe time), else DELETED (someone deleted it).
  void LoseGoneNode(EngineShard* s, Contender* c, const char* deleted_message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // How often a holder hears STILL_HELD, and within what it must.
  static Millis HeartbeatInterval(const SessionSlot& slot);
  static Millis RefreshWithin(const SessionSlot& slot);

 private:
  void OnConnected(EngineShard* s, SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void OnDisconnected(EngineShard* s, SessionSlot* slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void OnExpired(EngineShard* s, SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // The session is back: RESUMED if a read shows `c`'s node, else LOST.
  void ConfirmResume(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Creates the root (each path component), then starts the contenders
  // that waited for it.
  void Bootstrap(EngineShard* s, SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void EnsurePath(EngineShard* s, SessionSlot* slot, size_t index, std::vector<std::string> paths)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Schedules the next heartbeat tick of `slot`.
  void Heartbeat(EngineShard* s, SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Contact confirmed: ends an in-doubt period, steps stalled contenders,
  // refreshes the validity of the slot's holders on their streams.
  void OnContact(EngineShard* s, SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Steps the contenders that waited for the connection or a trusted
  // contact, and runs the ttl checks that waited for one.
  void StepStalled(EngineShard* s, SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Holds of `slot` are in doubt (disconnected, or heartbeat overdue):
  // SUSPENDED now, LOST when the safe time runs out.
  void Suspend(EngineShard* s, SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);

  // Reached only through the shard's liveness_, on its loop.
  bool last_serving_ = false;
  std::function<void(bool)> serving_listener_;
  std::vector<std::function<void(size_t, SessionEvent)>> session_listeners_;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ENGINE_SHARD_LIVENESS_H_
