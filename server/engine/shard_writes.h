// EngineShard::Writes: a shard's ZooKeeper writes of one loop turn sent
// together (issue 39, decision 2). The contender creates ready in one turn
// go as one multi, with one setData on the session's clock node, whose
// mzxid is every created node's czxid (its fencing token); the plain
// deletes (no mark, no local handoff) go as another. The rules are
// WriteBatcher's (write_batcher.h); this part sends the batches and applies
// their replies.
//
// A part of its shard, with state of its own (the queues and whether the
// next turn is posted) and no lock: it runs only on the shard's loop. Each
// method takes the shard and REQUIRES its loop role, so -Wthread-safety
// checks the part's calls into the shard (and the shard's into the part)
// against the same capability. Internal to server/engine/.
#ifndef TURNSTILE_SERVER_ENGINE_SHARD_WRITES_H_
#define TURNSTILE_SERVER_ENGINE_SHARD_WRITES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "server/engine/engine_shard.h"
#include "server/engine/write_batcher.h"

namespace turnstile {

class EngineShard::Writes {
 public:
  static constexpr size_t kMaxBatch = 64;

  // Queues `c`'s create (a new generation, state kCreating) for the loop's
  // next turn; an abandoned contender is forgotten instead.
  void IssueCreate(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Queues `c`'s plain delete (state kDeleting) for the loop's next turn.
  void QueueDelete(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Makes the session's clock node unless it exists (batched creates need
  // it; until then creates go one by one).
  void EnsureClock(EngineShard* s, SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // The session expired: what is queued is stale, and no multi of the old
  // session holds a lock back any longer.
  void Clear(EngineShard* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);

 private:
  void PostWrites(EngineShard* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void FlushCreates(EngineShard* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void SendCreate(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void SendCreateBatch(EngineShard* s, SessionSlot* slot, std::vector<WriteBatcher::Write> batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void OnCreateBatch(EngineShard* s, SessionSlot* slot, uint64_t epoch,
                     const std::vector<WriteBatcher::Write>& batch,
                     const std::vector<ZkMultiResult>& results)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void FlushDeletes(EngineShard* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void SendDelete(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void OnDeleteReply(EngineShard* s, Contender* c, ZkCode code)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void SendDeleteBatch(EngineShard* s, SessionSlot* slot, std::vector<WriteBatcher::Write> batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void OnDeleteBatch(EngineShard* s, SessionSlot* slot, uint64_t epoch,
                     const std::vector<WriteBatcher::Write>& batch,
                     const std::vector<ZkMultiResult>& results)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // The session's clock node: "<root>/%clock-<session id>".
  static std::string ClockPath(const std::string& root, int64_t session_id);
  // The path a contender's node is created from (ZooKeeper appends the
  // sequence).
  static std::string CreatePrefix(const Contender* c);

  // Creates and plain deletes waiting for the loop's next turn, and
  // whether that turn is posted. Reached only through the shard's
  // writes_, which its loop role guards.
  WriteBatcher creates_{kMaxBatch};
  WriteBatcher deletes_{kMaxBatch};
  bool posted_ = false;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ENGINE_SHARD_WRITES_H_
