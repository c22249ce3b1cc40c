// The engine's RPCs that do not contend: Release and KeepAlive by lease id
// (from any replica), Describe and List. Each goes to the session of the
// pool that serves the lock (List: any connected session).
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/engine/engine_shard.h"
#include "server/engine/gather.h"
#include "server/engine/engine_shard_internal.h"
#include "server/engine/shard_holds.h"
#include "server/recipe/handoff_rules.h"
#include "server/recipe/ordering.h"

namespace turnstile {

using namespace engine_internal;  // NOLINT(build/namespaces): the engine's own helpers

// ---------------------------------------------------------------------------
// Lease operations from any replica.

namespace {

// What a holder is shown as the requester of a revocation: with mutual TLS
// the verified identity, the requester's own label beside it.
std::string ShownRequester(const std::string& identity, const std::string& requester) {
  if (identity.empty()) return requester;
  if (requester.empty() || requester == identity) return identity;
  return absl::StrCat(identity, " (says \"", requester, "\")");
}

}  // namespace

namespace {

std::string LeaseNodePath(const std::string& root, const LeaseId& lease) {
  return root + "/" + lease.lock_segment + "/" + lease.contender.node;
}

}  // namespace

void EngineShard::ReleaseLease(
    const std::string& lease_id,
    std::function<void(absl::Status, const std::string& holder_identity)> done) {
  absl::StatusOr<LeaseId> lease = ParseLeaseId(lease_id);
  if (!lease.ok()) {
    done(lease.status(), "");
    return;
  }
  std::string path = LeaseNodePath(options_.root, *lease);
  RunOnLoop([this, lease, path, done, lease_id] {
    {
      OnLoop l(this);
      SessionSlot* slot = SlotOf(lease->lock_segment);
      if (!slot->connected) {
        Later([done] { done(absl::UnavailableError("replica has no ZooKeeper session"), ""); });
      } else if (Contender* c = FindByPath(path);
                 c != nullptr && c->state == State::kHeld && c->sink) {
        // Our own stream holds it, but did not ask: it is told LOST(DELETED),
        // exactly as a holder on another replica would be.
        holds_->Lose(this, c, LostReason::kDeleted, "released by lease id through the Release RPC");
        Later([done, holder = c->params.identity] { done(absl::OkStatus(), holder); });
      } else {
        auto deleted = [done, lease_id](ZkCode code, const std::string& holder) {
          if (code == ZkCode::kOk) {
            done(absl::OkStatus(), holder);
          } else if (code == ZkCode::kNoNode) {
            done(absl::NotFoundError(absl::StrCat(
                     "lease_id \"", lease_id,
                     "\" not found: already released, revoked or expired")),
                 "");
          } else {
            done(absl::UnavailableError(
                     absl::StrCat("ZooKeeper delete failed: ", ZkCodeName(code))),
                 "");
          }
        };
        // Someone else's hold ends involuntarily: if it has a lock-delay, the
        // lock node says so in the same transaction as the delete, so no
        // waiter or newcomer sees the node gone without the delay.
        const std::string lock_path = options_.root + "/" + lease->lock_segment;
        ZkSession* zk = slot->zk;
        zk->GetData(path, nullptr, [zk, path, lock_path, deleted](ZkCode code, const std::string& data,
                                                                 const ZkStat&) {
          if (code != ZkCode::kOk) return deleted(code, "");
          absl::StatusOr<ContenderInfo> info = DecodeContenderInfo(data);
          const std::string holder = info.ok() ? info->identity : "";
          if (!info.ok() || info->lock_delay_ms <= 0) {
            return zk->Delete(path, -1, [deleted, holder](ZkCode c) { deleted(c, holder); });
          }
          const int64_t until = std::chrono::duration_cast<Millis>(
                                    std::chrono::system_clock::now().time_since_epoch()).count() +
                                info->lock_delay_ms;
          engine_internal::DeleteInOneTransaction(
              zk, path, lock_path, EncodeLockMark("", until), "",
              [deleted, holder](ZkCode del, ZkCode) { deleted(del, holder); });
        });
      }
    }
    Deliver();
  });
}

namespace {

// Read-modify-write of a contender node's data, retried when another writer
// (a renewal, a revocation request) raced it: BAD_VERSION.
void RemoteRenew(ZkSession* zk, const std::string& path, int attempts,
                 std::function<void(absl::StatusOr<Millis>)> done,
                 std::function<absl::Status()> not_found) {
  zk->GetData(path, nullptr, [=](ZkCode code, const std::string& data, const ZkStat& stat) {
    if (code == ZkCode::kNoNode) return done(not_found());
    if (code != ZkCode::kOk) {
      return done(absl::UnavailableError(
          absl::StrCat("ZooKeeper read failed: ", ZkCodeName(code))));
    }
    absl::StatusOr<ContenderInfo> info = DecodeContenderInfo(data);
    Millis ttl(info.ok() ? info->ttl_ms : 0);
    std::string next = data;  // not ours to decode: rewrite unchanged (a renewal too)
    if (info.ok()) {
      ++info->renewals;
      next = EncodeContenderInfo(*info);
    }
    zk->SetData(path, next, stat.version, [=](ZkCode code, const ZkStat&) {
      if (code == ZkCode::kOk) {
        done(ttl);
      } else if (code == ZkCode::kBadVersion && attempts > 1) {
        RemoteRenew(zk, path, attempts - 1, done, not_found);
      } else if (code == ZkCode::kBadVersion) {
        done(ttl);  // renewals kept racing ours: the lease was renewed meanwhile
      } else if (code == ZkCode::kNoNode) {
        done(not_found());
      } else {
        done(absl::UnavailableError(absl::StrCat("ZooKeeper write failed: ", ZkCodeName(code))));
      }
    });
  });
}

}  // namespace

void EngineShard::WriteRevoke(
    ZkSession* zk, const std::string& path, const std::string& requester,
    const std::string& reason, int attempts,
    std::function<void(absl::Status, const std::string& holder_identity)> done) {
  zk->GetData(path, nullptr, [=](ZkCode code, const std::string& data, const ZkStat& stat) {
    if (code == ZkCode::kNoNode) return done(absl::NotFoundError("the lease is gone"), "");
    if (code != ZkCode::kOk) {
      return done(absl::UnavailableError(absl::StrCat("ZooKeeper read failed: ", ZkCodeName(code))),
                  "");
    }
    absl::StatusOr<ContenderInfo> info = DecodeContenderInfo(data);
    if (!info.ok()) {
      return done(absl::FailedPreconditionError(absl::StrCat(
                      "the lease's node was not written by turnstile: ", info.status().message())),
                  "");
    }
    ++info->revoke_id;
    info->revoke_by = requester;
    info->revoke_reason = reason;
    const std::string holder = info->identity;
    zk->SetData(path, EncodeContenderInfo(*info), stat.version, [=](ZkCode code, const ZkStat&) {
      if (code == ZkCode::kOk) {
        {
          OnLoop l(this);
          ++stats_.revokes_requested;
          if (observer_) observer_->OnRevokeRequested();
        }
        done(absl::OkStatus(), holder);
      } else if (code == ZkCode::kBadVersion && attempts > 1) {
        WriteRevoke(zk, path, requester, reason, attempts - 1, done);
      } else if (code == ZkCode::kNoNode) {
        done(absl::NotFoundError("the lease is gone"), "");
      } else {
        done(absl::UnavailableError(absl::StrCat("ZooKeeper write failed: ", ZkCodeName(code))), "");
      }
    });
  });
}

void EngineShard::Revoke(
    const std::string& lease_id, const std::string& requester, const std::string& reason,
    std::function<void(absl::Status, const std::string& holder_identity)> done,
    const std::string& identity) {
  if (absl::Status s = LockEngine::ValidateRevoke(lease_id, requester, reason, options_.limits);
      !s.ok()) {
    return done(s, "");
  }
  absl::StatusOr<LeaseId> lease = ParseLeaseId(lease_id);
  ZkSession* zk = SessionOf(lease->lock_segment);
  if (!zk->connected()) {
    return done(absl::UnavailableError("replica has no ZooKeeper session"), "");
  }
  WriteRevoke(zk, LeaseNodePath(options_.root, *lease), ShownRequester(identity, requester),
              reason, 5, [done, lease_id](absl::Status s, const std::string& holder) {
                if (absl::IsNotFound(s)) {
                  s = absl::NotFoundError(absl::StrCat(
                      "lease_id \"", lease_id, "\" not found: released, revoked or lost"));
                }
                done(s, holder);
              });
}

// A waiter that asked (AcquireOpen.revoke_holders), once queued: the
// holders ahead of it are asked to let go (the front entry; and the shared
// holders after it, for readers). Best effort: a holder that is gone
// meanwhile needs no asking. In a section.
void EngineShard::RequestRevokeOfHolders(Contender* c) {
  c->revoke_sent = true;
  for (const std::string& node : RevokeTargets(locks_[c->segment].queue, c->node)) {
    WriteRevoke(c->zk(), c->lock_path() + "/" + node, ShownRequester(c->params.identity, c->params.owner),
                c->params.revoke_reason, 5, [](absl::Status, const std::string&) {});
  }
}

void EngineShard::KeepAlive(const std::string& lease_id,
                           std::function<void(absl::StatusOr<Millis>)> done) {
  absl::StatusOr<LeaseId> lease = ParseLeaseId(lease_id);
  if (!lease.ok()) {
    done(lease.status());
    return;
  }
  std::string path = LeaseNodePath(options_.root, *lease);
  auto not_found = [lease_id] {
    return absl::NotFoundError(absl::StrCat(
        "lease_id \"", lease_id, "\" not found: released, revoked or lost"));
  };
  RunOnLoop([this, lease, path, done, not_found] {
    {
      OnLoop l(this);
      SessionSlot* slot = SlotOf(lease->lock_segment);
      Contender* c = FindByPath(path);
      if (c != nullptr) {
        if (c->state != State::kHeld || !c->sink) {
          Later([done, not_found] { done(not_found()); });
        } else {
          // Local: renew without touching ZooKeeper.
          if (c->params.ttl > Millis(0)) holds_->RenewTtl(this, c);
          Millis valid = c->params.ttl;
          if (!slot->trusted(Clock::now())) valid = std::min(valid, slot->SafeFor(Clock::now()));
          Later([done, valid] { done(valid); });
        }
      } else if (!slot->connected) {
        Later([done] { done(absl::UnavailableError("replica has no ZooKeeper session")); });
      } else {
        // Remote: count one renewal in the node's data (with its version);
        // the owning replica follows the counter (NoteOwnNode).
        RemoteRenew(slot->zk, path, /*attempts=*/5, done, not_found);
      }
    }
    Deliver();
  });
}

namespace {

// Read-modify-write of a hold's metadata (Proclaim), retried when another
// writer (a renewal, a revocation request) raced it.
void ProclaimWrite(ZkSession* zk, const std::string& path, uint64_t token,
                   std::map<std::string, std::string> metadata, int attempts,
                   std::function<void(absl::Status)> done,
                   std::function<absl::Status()> not_found) {
  zk->GetData(path, nullptr, [=](ZkCode code, const std::string& data, const ZkStat& stat) {
    if (code == ZkCode::kNoNode) return done(not_found());
    if (code != ZkCode::kOk) {
      return done(absl::UnavailableError(absl::StrCat("ZooKeeper read failed: ", ZkCodeName(code))));
    }
    if (static_cast<uint64_t>(stat.czxid) != token) {
      return done(absl::FailedPreconditionError(absl::StrCat(
          "fencing_token ", token, " is not this lease's token (", stat.czxid,
          "): a stale token; nothing was changed")));
    }
    absl::StatusOr<ContenderInfo> info = DecodeContenderInfo(data);
    if (!info.ok()) {
      return done(absl::FailedPreconditionError(absl::StrCat(
          "the lease's node was not written by turnstile: ", info.status().message())));
    }
    info->metadata = metadata;
    ++info->proclaims;
    zk->SetData(path, EncodeContenderInfo(*info), stat.version, [=](ZkCode code, const ZkStat&) {
      if (code == ZkCode::kOk) {
        done(absl::OkStatus());
      } else if (code == ZkCode::kBadVersion && attempts > 1) {
        ProclaimWrite(zk, path, token, metadata, attempts - 1, done, not_found);
      } else if (code == ZkCode::kNoNode) {
        done(not_found());
      } else {
        done(absl::UnavailableError(absl::StrCat("ZooKeeper write failed: ", ZkCodeName(code))));
      }
    });
  });
}

}  // namespace

void EngineShard::Proclaim(const std::string& lease_id, uint64_t fencing_token,
                          const std::map<std::string, std::string>& metadata,
                          std::function<void(absl::Status)> done) {
  if (absl::Status s = LockEngine::ValidateProclaim(lease_id, fencing_token, metadata, options_.limits);
      !s.ok()) {
    return done(s);
  }
  absl::StatusOr<LeaseId> lease = ParseLeaseId(lease_id);
  ZkSession* zk = SessionOf(lease->lock_segment);
  if (!zk->connected()) {
    return done(absl::UnavailableError("replica has no ZooKeeper session"));
  }
  auto not_found = [lease_id] {
    return absl::NotFoundError(absl::StrCat(
        "lease_id \"", lease_id, "\" not found: released, revoked or lost"));
  };
  ProclaimWrite(zk, LeaseNodePath(options_.root, *lease), fencing_token, metadata,
                /*attempts=*/5, std::move(done), not_found);
}

int64_t EngineShard::LocalGrantUnixMs(const std::string& path) const {
  OnLoop l(this);
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return 0;
  auto c = contenders_.find(it->second);
  if (c == contenders_.end()) return 0;
  const Contender* k = c->second.get();
  return k->state == State::kHeld && k->announced ? k->granted_unix_ms : 0;
}

// ---------------------------------------------------------------------------
// Introspection.

void EngineShard::Describe(
    const std::string& name,
    std::function<void(absl::StatusOr<LockDescription>)> done) {
  if (absl::Status s = ValidateLockName(name); !s.ok()) return done(s);
  const std::string segment = EncodeLockName(name);
  ZkSession* zk = SessionOf(segment);
  if (!zk->connected()) {
    return done(absl::UnavailableError("replica has no ZooKeeper session"));
  }
  std::string lock_path = options_.root + "/" + segment;
  auto not_found = [name] {
    return absl::NotFoundError(
        absl::StrCat("lock \"", name, "\" has no holders or waiters"));
  };
  zk->GetChildren(lock_path, [this, zk, name, lock_path, done, not_found](
                                  ZkCode code,
                                  const std::vector<std::string>& children) {
    if (code == ZkCode::kNoNode) return done(not_found());
    if (code != ZkCode::kOk) {
      return done(absl::UnavailableError(
          absl::StrCat("ZooKeeper read failed: ", ZkCodeName(code))));
    }
    // The lock's ordered view from this listing; the ordering rule then
    // says who holds (the same Decide the engine grants with), once every
    // contender node and the lock node are read (one gathered fan-out; the
    // answers arrive on the session's loop).
    auto view = std::make_shared<LockQueue>();
    view->ReplaceWith(children, [](const std::string&) { return uint64_t{0}; },
                      [](const LockQueue::Entry&) { return false; });
    std::vector<int32_t> seqs;
    std::vector<std::string> nodes;
    view->ForFront(view->size(), [&](int64_t, int32_t seq, const LockQueue::Entry& e) {
      seqs.push_back(seq);
      nodes.push_back(e.node);
    });
    if (seqs.empty()) return done(not_found());
    struct NodeRead {
      ZkCode code = ZkCode::kOk;
      std::string data;
      ZkStat stat;
    };
    const size_t n = seqs.size();
    // Slots 0..n-1: the contenders in queue order; slot n: the lock node's
    // own data (a lock-delay in progress).
    auto g = Gather<NodeRead>::New(n + 1, [this, name, lock_path, view, seqs, nodes, done,
                                           not_found](std::vector<NodeRead> reads) {
      LockDescription d;
      const int64_t now_unix_ms = std::chrono::duration_cast<Millis>(
          std::chrono::system_clock::now().time_since_epoch()).count();
      if (reads[seqs.size()].code == ZkCode::kOk) {
        const int64_t until = DecodeLockMark(reads[seqs.size()].data).delay_until_unix_ms;
        if (until > now_unix_ms) d.delayed_until_unix_ms = until;
      }
      std::vector<std::optional<ContenderView>> views(seqs.size());
      for (size_t i = 0; i < seqs.size(); ++i) {
        const NodeRead& r = reads[i];
        if (r.code != ZkCode::kOk) continue;
        ContenderView v;
        if (auto info = DecodeContenderInfo(r.data); info.ok()) v.info = *info;
        v.kind = view->Find(seqs[i])->kind;
        v.max_holders = view->Find(seqs[i])->max_holders;
        v.since_unix_ms = r.stat.ctime_ms;
        v.fencing_token = static_cast<uint64_t>(r.stat.czxid);
        views[i] = v;
      }
      // Those that left while we looked are not in the queue.
      for (size_t i = 0; i < seqs.size(); ++i) {
        if (views[i]) continue;
        const LockQueue::Entry* gone = view->Find(seqs[i]);
        if (gone != nullptr) view->Erase(seqs[i], std::string(gone->node));
      }
      int64_t pos = 0;
      std::vector<std::string> holder_paths;
      for (size_t i = 0; i < seqs.size(); ++i) {
        std::optional<ContenderView>& v = views[i];
        if (!v) continue;
        v->position = ++pos;
        const bool holds = turnstile::Decide(*view, seqs[i], v->kind, v->max_holders).holds;
        if (v->kind == ContenderKind::kSemaphore && d.max_holders == 0) {
          d.max_holders = v->max_holders;  // the front's N: the lock's
        }
        if (!holds) v->info.granted_unix_ms = 0;  // a mark still in flight
        (holds ? d.holders : d.waiters).push_back(*v);
        if (holds) holder_paths.push_back(lock_path + "/" + nodes[i]);
      }
      // An exclusive or shared holder's grant time is known only to the
      // replica that granted it (no write on a mutex's path for it).
      {
        OnLoop el(this);
        for (size_t h = 0; h < d.holders.size(); ++h) {
          if (d.holders[h].info.granted_unix_ms > 0) continue;
          Contender* c = FindByPath(holder_paths[h]);
          if (c != nullptr && c->state == State::kHeld && c->announced) {
            d.holders[h].info.granted_unix_ms = c->granted_unix_ms;
          }
        }
      }
      if (pos == 0) return done(not_found());
      d.name = name;
      done(std::move(d));
    });
    auto read = [g](size_t slot) {
      return [g, slot](ZkCode code, const std::string& data, const ZkStat& stat) {
        g->Answer(slot, NodeRead{code, data, stat});
      };
    };
    zk->GetData(lock_path, nullptr, read(n));
    for (size_t i = 0; i < n; ++i) zk->GetData(lock_path + "/" + nodes[i], nullptr, read(i));
  });
}

void EngineShard::List(const std::string& prefix, int limit,
                      std::function<void(absl::StatusOr<LockList>)> done,
                      std::function<bool(const std::string&)> visible) {
  if (absl::Status s = LockEngine::ValidateList(prefix, limit); !s.ok()) return done(s);
  if (limit == 0) limit = LockEngine::kDefaultListLimit;
  ZkSession* zk = AnyConnected();  // reads only: any session of the pool answers
  if (zk == nullptr) {
    return done(absl::UnavailableError("replica has no ZooKeeper session"));
  }
  zk->GetChildren(options_.root, [this, zk, prefix, limit, done, visible](
                                      ZkCode code,
                                      const std::vector<std::string>& children) {
    if (code != ZkCode::kOk) {
      return done(absl::UnavailableError(
          absl::StrCat("ZooKeeper read failed: ", ZkCodeName(code))));
    }
    std::vector<std::pair<std::string, std::string>> names;  // name, segment
    for (const auto& seg : children) {
      absl::StatusOr<std::string> n = DecodeLockName(seg);
      // Names the caller may not see are dropped before anything is
      // counted: `limit` and `truncated` are about visible names.
      if (n.ok() && absl::StartsWith(*n, prefix) && (!visible || visible(*n))) {
        names.emplace_back(*n, seg);
      }
    }
    std::sort(names.begin(), names.end());
    if (names.empty()) return done(LockList{});
    // Empty lock nodes linger until ZooKeeper reaps containers: keep only
    // locks that have contenders now. One Exists per candidate, in name
    // order, kListBatch at a time, stopping once limit + 1 live locks are
    // known: the cost follows the answer, not the number of lock nodes.
    auto job = std::make_shared<ListJob>();
    job->names = std::move(names);
    job->limit = static_cast<size_t>(limit);
    job->zk = zk;
    job->done = std::move(done);
    ListBatch(std::move(job));
  });
}

void EngineShard::ListBatch(std::shared_ptr<ListJob> job) {
  // One batch at a time: the job is touched by this call and then by the
  // batch's last answer only (the gather hands it over).
  const size_t begin = job->next;
  const size_t end = std::min(job->names.size(), begin + LockEngine::kListBatch);
  job->next = end;
  auto g = Gather<char>::New(end - begin, [this, job, begin](std::vector<char> live) {
    for (size_t j = 0; j < live.size(); ++j) {
      if (live[j]) job->out.names.push_back(job->names[begin + j].first);
    }
    if (job->out.names.size() > job->limit) {
      job->out.names.resize(job->limit);
      job->out.truncated = true;
    } else if (job->next < job->names.size()) {
      return ListBatch(job);  // from this completion: issues async calls only
    }
    job->done(std::move(job->out));
  });
  for (size_t i = begin; i < end; ++i) {
    job->zk->Exists(options_.root + "/" + job->names[i].second,
                    [g, i, begin](ZkCode code, const ZkStat& stat) {
                      g->Answer(i - begin, code == ZkCode::kOk && stat.num_children > 0);
                    });
  }
}

}  // namespace turnstile
