// Batched ZooKeeper writes (issue 39, decision 2): the contender creates a
// shard has ready in one turn of its loop go to ZooKeeper as one multi,
// with one setData on the session's clock node, whose mzxid is every
// created node's czxid (its fencing token); its plain deletes (no mark, no
// local handoff) go as another. The rules are WriteBatcher's
// (write_batcher.h); this file sends the batches and applies their replies.
// Part of EngineShard (server/engine/engine_shard.h).
#include <cinttypes>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "server/engine/engine_shard.h"
#include "server/engine/engine_shard_internal.h"

namespace turnstile {

using engine_internal::IsRetryable;
using engine_internal::IsSessionGone;

std::string EngineShard::ClockPath(int64_t session_id) const {
  // "%c" is no %XX escape, so no lock name encodes to this segment: List
  // and every other walk of the root's children skip it.
  char buf[40];
  std::snprintf(buf, sizeof(buf), "/%%clock-%016" PRIx64, static_cast<uint64_t>(session_id));
  return options_.root + buf;
}

// The session's clock: an ephemeral node of its own under the root (it goes
// with the session). Until it exists creates go one by one.
void EngineShard::EnsureClock(SessionSlot* slot) {
  if (!options_.batch_writes || !slot->clock_path.empty()) return;
  const std::string path = ClockPath(slot->zk->credentials().session_id);
  const uint64_t epoch = slot->epoch;
  slot->zk->Create(path, "", CreateMode::kEphemeral,
                   [this, slot, path, epoch](ZkCode code, const std::string&, const ZkStat&) {
                     OnLoop l(this);
                     if (shut_down_ || epoch != slot->epoch) return;
                     // NODEEXISTS: made by this session before a reconnect.
                     if (code == ZkCode::kOk || code == ZkCode::kNodeExists) {
                       slot->clock_path = path;
                     }
                   });
}

void EngineShard::IssueCreate(Contender* c) {
  if (c->abandoned) {
    Forget(c);
    return;
  }
  SetState(c, State::kCreating);
  creates_.Add(WriteBatcher::Write{c->id, ++c->gen, c->segment});
  PostWrites();
}

void EngineShard::QueueDelete(Contender* c) {
  deletes_.Add(WriteBatcher::Write{c->id, c->gen, c->segment});
  PostWrites();
}

// The writes queued leave at the loop's next turn, with whatever else is
// ready by then: deletes first (they free locks), then creates.
void EngineShard::PostWrites() {
  if (writes_posted_) return;
  writes_posted_ = true;
  loop_->Post([this] {
    {
      OnLoop l(this);
      writes_posted_ = false;
      if (!shut_down_) {
        FlushDeletes();
        FlushCreates();
      }
    }
    Deliver();
  });
}

void EngineShard::FlushCreates() {
  std::vector<Contender*> forget;
  for (;;) {
    std::vector<WriteBatcher::Write> batch = creates_.Next([&](const WriteBatcher::Write& w) {
      AssertHeld();  // Next calls it synchronously
      Contender* c = Find(w.id, w.gen);
      if (c == nullptr || c->state != State::kCreating) return false;
      if (c->abandoned) {
        // Ended before its create left: nothing to create or delete.
        forget.push_back(c);
        return false;
      }
      return true;
    });
    if (batch.empty()) break;
    SessionSlot* slot = &slots_[0];
    if (batch.size() == 1 || slot->clock_path.empty()) {
      for (const WriteBatcher::Write& w : batch) SendCreate(Find(w.id, w.gen));
    } else {
      SendCreateBatch(slot, std::move(batch));
    }
  }
  for (Contender* c : forget) Forget(c);
}

// The path a contender's node is created from (ZooKeeper appends the
// sequence).
std::string EngineShard::CreatePrefix(const Contender* c) {
  return c->lock_path() + "/" +
         ContenderNodePrefix(c->params.kind, c->uid_view(), c->params.max_holders);
}

void EngineShard::SendCreate(Contender* c) {
  c->create_order = ++create_counter_;
  const uint64_t id = c->id, gen = c->gen;
  c->zk()->Create(CreatePrefix(c), CreateData(c), CreateMode::kEphemeralSequential,
                  [this, id, gen](ZkCode code, const std::string& path, const ZkStat& stat) {
                    {
                      OnLoop l(this);
                      OnCreated(id, gen, code, path, stat);
                    }
                    Deliver();
                  });
  // Pipelined: ZooKeeper answers one session's requests in order, so a
  // listing sent right behind the create already contains the new node and
  // costs no extra round trip.
  RequestList(c->segment);
}

void EngineShard::SendCreateBatch(SessionSlot* slot, std::vector<WriteBatcher::Write> batch) {
  std::vector<ZkMultiOp> ops;
  ops.reserve(batch.size() + 1);
  for (const WriteBatcher::Write& w : batch) {
    Contender* c = Find(w.id, w.gen);
    c->create_order = ++create_counter_;
    ops.push_back(
        ZkMultiOp::Create(CreatePrefix(c), CreateData(c), CreateMode::kEphemeralSequential));
  }
  ops.push_back(ZkMultiOp::SetData(slot->clock_path, ""));
  creates_.InFlight(batch);
  ++stats_.create_batches;
  stats_.batched_creates += batch.size();
  if (batch.size() > stats_.largest_create_batch) stats_.largest_create_batch = batch.size();
  std::vector<std::string> segments;
  for (const WriteBatcher::Write& w : batch) segments.push_back(w.segment);
  const uint64_t epoch = slot->epoch;
  slot->zk->Multi(std::move(ops), [this, slot, epoch, batch = std::move(batch)](
                                      const std::vector<ZkMultiResult>& results) {
    {
      OnLoop l(this);
      if (!shut_down_) OnCreateBatch(slot, epoch, batch, results);
    }
    Deliver();
  });
  // Behind the multi, one listing per lock (coalesced as ever).
  for (const std::string& segment : segments) RequestList(segment);
}

void EngineShard::OnCreateBatch(SessionSlot* slot, uint64_t epoch,
                                const std::vector<WriteBatcher::Write>& batch,
                                const std::vector<ZkMultiResult>& results) {
  if (epoch != slot->epoch) return;  // the session expired: its contenders were re-queued
  creates_.Landed(batch);
  const ZkMultiResult& clock = results.back();
  if (clock.code == ZkCode::kOk) {
    // Applied: every node has the multi's zxid as its czxid.
    ZkStat stat;
    stat.czxid = clock.stat.mzxid;
    for (size_t i = 0; i < batch.size(); ++i) {
      OnCreated(batch[i].id, batch[i].gen, ZkCode::kOk, results[i].path, stat);
    }
  } else if (IsRetryable(clock.code) || IsSessionGone(clock.code)) {
    // The request as a whole failed: each create may have applied (or, the
    // session gone, its node with it), as for a lone create.
    for (const WriteBatcher::Write& w : batch) {
      OnCreated(w.id, w.gen, clock.code, "", ZkStat{});
    }
  } else {
    // Nothing applied (one create's lock node is missing, a refusal, or the
    // clock is gone): split, and resend each create alone in its order, so
    // each meets its own outcome as a lone create would.
    const bool clock_failed = clock.code != ZkCode::kOther;  // not merely not reached
    if (clock_failed) slot->clock_path.clear();
    ++stats_.create_batches_split;
    for (const WriteBatcher::Write& w : batch) {
      Contender* c = Find(w.id, w.gen);
      if (c == nullptr || c->state != State::kCreating) continue;
      if (c->abandoned) {
        Forget(c);
        continue;
      }
      SendCreate(c);
    }
    if (clock_failed) EnsureClock(slot);
  }
  // Creates held back for these locks may leave now.
  FlushCreates();
}

void EngineShard::FlushDeletes() {
  for (;;) {
    std::vector<WriteBatcher::Write> batch = deletes_.Next([&](const WriteBatcher::Write& w) {
      AssertHeld();  // Next calls it synchronously
      Contender* c = Find(w.id, w.gen);
      return c != nullptr && c->state == State::kDeleting;
    });
    if (batch.empty()) break;
    if (batch.size() == 1 || !options_.batch_writes) {
      for (const WriteBatcher::Write& w : batch) SendDelete(Find(w.id, w.gen));
    } else {
      SendDeleteBatch(&slots_[0], std::move(batch));
    }
  }
}

void EngineShard::SendDelete(Contender* c) {
  const uint64_t id = c->id, gen = c->gen;
  c->zk()->Delete(c->path(), -1, [this, id, gen](ZkCode code) {
    {
      OnLoop l(this);
      if (Contender* c = Find(id, gen)) OnDeleteReply(c, code);
    }
    Deliver();
  });
}

void EngineShard::OnDeleteReply(Contender* c, ZkCode code) {
  if (IsRetryable(code)) {
    c->delete_retried = true;
    Stall(c);
  } else if (code == ZkCode::kNoNode) {
    OnDeleteFoundNoNode(c);
  } else {
    OnDeleted(c, nullptr);  // deleted, or gone with the session
  }
}

void EngineShard::SendDeleteBatch(SessionSlot* slot, std::vector<WriteBatcher::Write> batch) {
  std::vector<ZkMultiOp> ops;
  ops.reserve(batch.size());
  for (const WriteBatcher::Write& w : batch) ops.push_back(ZkMultiOp::Delete(Find(w.id, w.gen)->path()));
  deletes_.InFlight(batch);
  ++stats_.delete_batches;
  stats_.batched_deletes += batch.size();
  if (batch.size() > stats_.largest_delete_batch) stats_.largest_delete_batch = batch.size();
  const uint64_t epoch = slot->epoch;
  slot->zk->Multi(std::move(ops), [this, slot, epoch, batch = std::move(batch)](
                                      const std::vector<ZkMultiResult>& results) {
    {
      OnLoop l(this);
      if (!shut_down_) OnDeleteBatch(slot, epoch, batch, results);
    }
    Deliver();
  });
}

void EngineShard::OnDeleteBatch(SessionSlot* slot, uint64_t epoch,
                                const std::vector<WriteBatcher::Write>& batch,
                                const std::vector<ZkMultiResult>& results) {
  if (epoch == slot->epoch) deletes_.Landed(batch);
  bool applied = true;
  for (const ZkMultiResult& r : results) applied = applied && r.code == ZkCode::kOk;
  // The request as a whole failed (every op has its code): as for a lone
  // delete. Otherwise one delete failed (its node already gone) and
  // nothing applied: each is resent alone, and meets its own outcome.
  const ZkCode whole = results.front().code;
  const bool request_failed = IsRetryable(whole) || IsSessionGone(whole);
  if (!applied && !request_failed) ++stats_.delete_batches_split;
  for (const WriteBatcher::Write& w : batch) {
    Contender* c = Find(w.id, w.gen);
    if (c == nullptr) continue;
    if (applied) {
      OnDeleted(c, nullptr);
    } else if (request_failed) {
      OnDeleteReply(c, whole);
    } else {
      SendDelete(c);
    }
  }
  FlushDeletes();
}

}  // namespace turnstile
