// EngineShard::Writes (shard_writes.h): a shard's creates and plain deletes
// of one loop turn sent together, by write_batcher.h's rules.
#include "server/engine/shard_writes.h"

#include <cinttypes>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "server/engine/engine_shard_internal.h"
#include "server/engine/shard_holds.h"
#include "server/engine/shard_waiters.h"

namespace turnstile {

using engine_internal::IsRetryable;
using engine_internal::IsSessionGone;

std::string EngineShard::Writes::ClockPath(const std::string& root, int64_t session_id) {
  // "%c" is no %XX escape, so no lock name encodes to this segment: List
  // and every other walk of the root's children skip it.
  char buf[40];
  std::snprintf(buf, sizeof(buf), "/%%clock-%016" PRIx64, static_cast<uint64_t>(session_id));
  return root + buf;
}

// The session's clock: an ephemeral node of its own under the root (it goes
// with the session). Until it exists creates go one by one.
void EngineShard::Writes::EnsureClock(EngineShard* s, SessionSlot* slot) {
  if (!s->options_.batch_writes || !slot->clock_path.empty()) return;
  const std::string path = ClockPath(s->options_.root, slot->zk->credentials().session_id);
  const uint64_t epoch = slot->epoch;
  slot->zk->Create(path, "", CreateMode::kEphemeral,
                   [s, slot, path, epoch](ZkCode code, const std::string&, const ZkStat&) {
                     OnLoop l(s);
                     if (s->shut_down_ || epoch != slot->epoch) return;
                     // NODEEXISTS: made by this session before a reconnect.
                     if (code == ZkCode::kOk || code == ZkCode::kNodeExists) {
                       slot->clock_path = path;
                     }
                   });
}

void EngineShard::Writes::IssueCreate(EngineShard* s, Contender* c) {
  if (c->abandoned) {
    s->holds_->Forget(s, c);
    return;
  }
  s->SetState(c, State::kCreating);
  creates_.Add(WriteBatcher::Write{c->id, ++c->gen, c->segment});
  PostWrites(s);
}

void EngineShard::Writes::QueueDelete(EngineShard* s, Contender* c) {
  deletes_.Add(WriteBatcher::Write{c->id, c->gen, c->segment});
  PostWrites(s);
}

void EngineShard::Writes::Clear(EngineShard* s) {
  creates_.Clear();
  deletes_.Clear();
}

// The writes queued leave at the loop's next turn, with whatever else is
// ready by then: deletes first (they free locks), then creates.
void EngineShard::Writes::PostWrites(EngineShard* s) {
  if (posted_) return;
  posted_ = true;
  s->loop_->Post([this, s] {
    {
      OnLoop l(s);
      posted_ = false;
      if (!s->shut_down_) {
        FlushDeletes(s);
        FlushCreates(s);
      }
    }
    s->Deliver();
  });
}

void EngineShard::Writes::FlushCreates(EngineShard* s) {
  std::vector<Contender*> forget;
  for (;;) {
    std::vector<WriteBatcher::Write> batch = creates_.Next([&](const WriteBatcher::Write& w) {
      s->AssertHeld();  // Next calls it synchronously
      Contender* c = s->Find(w.id, w.gen);
      if (c == nullptr || c->state != State::kCreating) return false;
      if (c->abandoned) {
        // Ended before its create left: nothing to create or delete.
        forget.push_back(c);
        return false;
      }
      return true;
    });
    if (batch.empty()) break;
    SessionSlot* slot = &s->slots_[0];
    if (batch.size() == 1 || slot->clock_path.empty()) {
      for (const WriteBatcher::Write& w : batch) SendCreate(s, s->Find(w.id, w.gen));
    } else {
      SendCreateBatch(s, slot, std::move(batch));
    }
  }
  for (Contender* c : forget) s->holds_->Forget(s, c);
}

std::string EngineShard::Writes::CreatePrefix(const Contender* c) {
  return c->lock_path() + "/" +
         ContenderNodePrefix(c->params.kind, c->uid_view(), c->params.max_holders);
}

void EngineShard::Writes::SendCreate(EngineShard* s, Contender* c) {
  c->create_order = ++s->create_counter_;
  const uint64_t id = c->id, gen = c->gen;
  c->zk()->Create(CreatePrefix(c), s->CreateData(c), CreateMode::kEphemeralSequential,
                  [s, id, gen](ZkCode code, const std::string& path, const ZkStat& stat) {
                    {
                      OnLoop l(s);
                      s->OnCreated(id, gen, code, path, stat);
                    }
                    s->Deliver();
                  });
  // Pipelined: ZooKeeper answers one session's requests in order, so a
  // listing sent right behind the create already contains the new node and
  // costs no extra round trip.
  s->waiters_->RequestList(s, c->segment);
}

void EngineShard::Writes::SendCreateBatch(EngineShard* s, SessionSlot* slot,
                                          std::vector<WriteBatcher::Write> batch) {
  std::vector<ZkMultiOp> ops;
  ops.reserve(batch.size() + 1);
  for (const WriteBatcher::Write& w : batch) {
    Contender* c = s->Find(w.id, w.gen);
    c->create_order = ++s->create_counter_;
    ops.push_back(
        ZkMultiOp::Create(CreatePrefix(c), s->CreateData(c), CreateMode::kEphemeralSequential));
  }
  ops.push_back(ZkMultiOp::SetData(slot->clock_path, ""));
  creates_.InFlight(batch);
  EngineStats& stats = s->stats_;
  ++stats.create_batches;
  stats.batched_creates += batch.size();
  if (batch.size() > stats.largest_create_batch) stats.largest_create_batch = batch.size();
  std::vector<std::string> segments;
  for (const WriteBatcher::Write& w : batch) segments.push_back(w.segment);
  const uint64_t epoch = slot->epoch;
  slot->zk->Multi(std::move(ops), [this, s, slot, epoch, batch = std::move(batch)](
                                      const std::vector<ZkMultiResult>& results) {
    {
      OnLoop l(s);
      if (!s->shut_down_) OnCreateBatch(s, slot, epoch, batch, results);
    }
    s->Deliver();
  });
  // Behind the multi, one listing per lock (coalesced as ever).
  for (const std::string& segment : segments) s->waiters_->RequestList(s, segment);
}

void EngineShard::Writes::OnCreateBatch(EngineShard* s, SessionSlot* slot, uint64_t epoch,
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
      s->OnCreated(batch[i].id, batch[i].gen, ZkCode::kOk, results[i].path, stat);
    }
  } else if (IsRetryable(clock.code) || IsSessionGone(clock.code)) {
    // The request as a whole failed: each create may have applied (or, the
    // session gone, its node with it), as for a lone create.
    for (const WriteBatcher::Write& w : batch) {
      s->OnCreated(w.id, w.gen, clock.code, "", ZkStat{});
    }
  } else {
    // Nothing applied (one create's lock node is missing, a refusal, or the
    // clock is gone): split, and resend each create alone in its order, so
    // each meets its own outcome as a lone create would.
    const bool clock_failed = clock.code != ZkCode::kOther;  // not merely not reached
    if (clock_failed) slot->clock_path.clear();
    ++s->stats_.create_batches_split;
    for (const WriteBatcher::Write& w : batch) {
      Contender* c = s->Find(w.id, w.gen);
      if (c == nullptr || c->state != State::kCreating) continue;
      if (c->abandoned) {
        s->holds_->Forget(s, c);
        continue;
      }
      SendCreate(s, c);
    }
    if (clock_failed) EnsureClock(s, slot);
  }
  // Creates held back for these locks may leave now.
  FlushCreates(s);
}

void EngineShard::Writes::FlushDeletes(EngineShard* s) {
  for (;;) {
    std::vector<WriteBatcher::Write> batch = deletes_.Next([&](const WriteBatcher::Write& w) {
      s->AssertHeld();  // Next calls it synchronously
      Contender* c = s->Find(w.id, w.gen);
      return c != nullptr && c->state == State::kDeleting;
    });
    if (batch.empty()) break;
    if (batch.size() == 1 || !s->options_.batch_writes) {
      for (const WriteBatcher::Write& w : batch) SendDelete(s, s->Find(w.id, w.gen));
    } else {
      SendDeleteBatch(s, &s->slots_[0], std::move(batch));
    }
  }
}

void EngineShard::Writes::SendDelete(EngineShard* s, Contender* c) {
  const uint64_t id = c->id, gen = c->gen;
  c->zk()->Delete(c->path(), -1, [this, s, id, gen](ZkCode code) {
    {
      OnLoop l(s);
      if (Contender* c = s->Find(id, gen)) OnDeleteReply(s, c, code);
    }
    s->Deliver();
  });
}

void EngineShard::Writes::OnDeleteReply(EngineShard* s, Contender* c, ZkCode code) {
  if (IsRetryable(code)) {
    c->delete_retried = true;
    s->Stall(c);
  } else if (code == ZkCode::kNoNode) {
    s->holds_->OnDeleteFoundNoNode(s, c);
  } else {
    s->holds_->OnDeleted(s, c, nullptr);  // deleted, or gone with the session
  }
}

void EngineShard::Writes::SendDeleteBatch(EngineShard* s, SessionSlot* slot,
                                          std::vector<WriteBatcher::Write> batch) {
  std::vector<ZkMultiOp> ops;
  ops.reserve(batch.size());
  for (const WriteBatcher::Write& w : batch) {
    ops.push_back(ZkMultiOp::Delete(s->Find(w.id, w.gen)->path()));
  }
  deletes_.InFlight(batch);
  EngineStats& stats = s->stats_;
  ++stats.delete_batches;
  stats.batched_deletes += batch.size();
  if (batch.size() > stats.largest_delete_batch) stats.largest_delete_batch = batch.size();
  const uint64_t epoch = slot->epoch;
  slot->zk->Multi(std::move(ops), [this, s, slot, epoch, batch = std::move(batch)](
                                      const std::vector<ZkMultiResult>& results) {
    {
      OnLoop l(s);
      if (!s->shut_down_) OnDeleteBatch(s, slot, epoch, batch, results);
    }
    s->Deliver();
  });
}

void EngineShard::Writes::OnDeleteBatch(EngineShard* s, SessionSlot* slot, uint64_t epoch,
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
  if (!applied && !request_failed) ++s->stats_.delete_batches_split;
  for (const WriteBatcher::Write& w : batch) {
    Contender* c = s->Find(w.id, w.gen);
    if (c == nullptr) continue;
    if (applied) {
      s->holds_->OnDeleted(s, c, nullptr);
    } else if (request_failed) {
      OnDeleteReply(s, c, whole);
    } else {
      SendDelete(s, c);
    }
  }
  FlushDeletes(s);
}

}  // namespace turnstile
