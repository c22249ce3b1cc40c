// The fencing-token check (CheckToken): does a token belong to a hold?
//
// A token is its contender node's czxid. The check lists the lock once,
// decides who holds with the same ordering rule the engine grants by
// (ordering.h), and reads only what it needs:
//   - the holders (one node for a mutex): CURRENT if one has the token;
//   - otherwise, if the token lies above some holder's (a waiter's at
//     most), the waiters by binary search: within one lock node, czxid
//     grows with the sequence suffix (both follow the order of the creates
//     in that parent), so O(log waiters) reads find the node or prove no
//     waiter has the token.
// Every answer describes the lock as the listing found it: a holder read
// afterwards is still there, so the holders and their tokens are exact at
// the listing; a holder gone in between makes the check list again (up to
// LockEngine::kCheckAttempts times). A waiter gone before its read is
// simply dropped from the search: if it had the token, SUPERSEDED is true
// from then on (a node never comes back), and nothing else depends on it.
// Unless allow_stale, a sync on the session precedes the listing: ZooKeeper
// answers one session's requests in order, so the listing reflects every
// write committed before the call (linearizable).
//
// Touches no shard state: no section; the callbacks run on the session's
// loop (in place after it is closed).
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/engine/engine_shard.h"
#include "server/engine/gather.h"
#include "server/recipe/ordering.h"

namespace turnstile {

namespace {

// One CheckToken in progress. Its steps run one after the other (each
// issued from the previous one's completion), except the holders' reads,
// which are pipelined and gathered (gather.h).
struct TokenCheckJob {
  ZkSession* zk = nullptr;
  std::string lock_path;
  uint64_t token = 0;
  bool linearizable = false;
  int attempts_left = LockEngine::kCheckAttempts;
  std::function<void(absl::StatusOr<TokenCheck>)> done;

  // The current listing, in queue order.
  std::vector<std::string> nodes;
  std::vector<bool> holds;

  void Answer(TokenCheck::Verdict v, uint64_t highest) {
    TokenCheck c;
    c.verdict = v;
    c.highest_holder_token = highest;
    c.linearizable = linearizable;
    done(c);
  }
  void Fail(const char* what, ZkCode code) {
    done(absl::UnavailableError(absl::StrCat("ZooKeeper ", what, " failed: ", ZkCodeName(code),
                                             "; the token's state is unknown")));
  }
};

void ListForCheck(std::shared_ptr<TokenCheckJob> job);

// Binary search of candidates[lo, hi) (waiter indices in queue order, so
// in czxid order) for the token.
void SearchWaiters(std::shared_ptr<TokenCheckJob> job, std::shared_ptr<std::vector<size_t>> cand,
                   size_t lo, size_t hi, uint64_t highest) {
  if (lo >= hi) return job->Answer(TokenCheck::Verdict::kSuperseded, highest);
  const size_t mid = lo + (hi - lo) / 2;
  job->zk->Exists(job->lock_path + "/" + job->nodes[(*cand)[mid]],
                  [job, cand, lo, hi, mid, highest](ZkCode code, const ZkStat& stat) {
                    if (code == ZkCode::kNoNode) {
                      cand->erase(cand->begin() + static_cast<std::ptrdiff_t>(mid));
                      return SearchWaiters(job, cand, lo, hi - 1, highest);
                    }
                    if (code != ZkCode::kOk) return job->Fail("read", code);
                    const uint64_t c = static_cast<uint64_t>(stat.czxid);
                    if (c == job->token) {
                      return job->Answer(TokenCheck::Verdict::kWaiting, highest);
                    }
                    if (c < job->token) return SearchWaiters(job, cand, mid + 1, hi, highest);
                    SearchWaiters(job, cand, lo, mid, highest);
                  });
}

// Every holder's read is in (REQUIRES: none missing). Decides, or searches
// the waiters, or lists again.
void HoldersRead(std::shared_ptr<TokenCheckJob> job, bool holder_gone, ZkCode failure,
                 std::vector<uint64_t> czxid) {
  if (failure != ZkCode::kOk) return job->Fail("read", failure);
  if (holder_gone) {
    // The listing's holders are no longer all there: decide on a newer one.
    if (--job->attempts_left > 0) return ListForCheck(job);
    return job->done(absl::UnavailableError(absl::StrCat(
        "the lock's holders changed during each of ", LockEngine::kCheckAttempts,
        " listings; the token's state is unknown (retry)")));
  }
  uint64_t highest = 0;
  bool current = false;
  for (size_t i = 0; i < czxid.size(); ++i) {
    if (!job->holds[i]) continue;
    highest = std::max(highest, czxid[i]);
    current = current || czxid[i] == job->token;
  }
  if (current) return job->Answer(TokenCheck::Verdict::kCurrent, highest);
  // Only waiters between the nearest holders below and above the token
  // can have it (czxid grows in queue order). Holders come first in the
  // queue, so a token under the highest holder's needs no read at all.
  size_t from = 0, to = job->nodes.size();
  for (size_t i = 0; i < czxid.size(); ++i) {
    if (!job->holds[i]) continue;
    if (czxid[i] < job->token) from = i + 1;
    if (czxid[i] > job->token && i < to) to = i;
  }
  auto cand = std::make_shared<std::vector<size_t>>();
  for (size_t i = from; i < to; ++i) {
    if (!job->holds[i]) cand->push_back(i);
  }
  SearchWaiters(job, cand, 0, cand->size(), highest);
}

void ListForCheck(std::shared_ptr<TokenCheckJob> job) {
  job->zk->GetChildren(job->lock_path, [job](ZkCode code,
                                             const std::vector<std::string>& children) {
    // No lock node: no contender at all.
    if (code == ZkCode::kNoNode) return job->Answer(TokenCheck::Verdict::kSuperseded, 0);
    if (code != ZkCode::kOk) return job->Fail("listing", code);
    LockQueue view;
    view.ReplaceWith(children, [](const std::string&) { return uint64_t{0}; },
                     [](const LockQueue::Entry&) { return false; });
    job->nodes.clear();
    job->holds.clear();
    view.ForFront(view.size(), [&](int64_t, int32_t seq, const LockQueue::Entry& e) {
      job->nodes.push_back(e.node);
      job->holds.push_back(Decide(view, seq, e.kind, e.max_holders).holds);
    });
    if (job->nodes.empty()) return job->Answer(TokenCheck::Verdict::kSuperseded, 0);
    std::vector<size_t> holders;
    for (size_t i = 0; i < job->nodes.size(); ++i) {
      if (job->holds[i]) holders.push_back(i);
    }
    if (holders.empty()) {  // the front always holds; a listing of foreign kinds only
      return HoldersRead(job, false, ZkCode::kOk, std::vector<uint64_t>(job->nodes.size(), 0));
    }
    // Each holder's read: its code and czxid; the last one decides.
    struct Read {
      ZkCode code = ZkCode::kOk;
      uint64_t czxid = 0;
    };
    auto g = Gather<Read>::New(holders.size(), [job, holders](std::vector<Read> reads) {
      bool gone = false;
      ZkCode failure = ZkCode::kOk;
      std::vector<uint64_t> czxid(job->nodes.size(), 0);  // by index; 0 = not read
      for (size_t k = 0; k < reads.size(); ++k) {
        if (reads[k].code == ZkCode::kOk) {
          czxid[holders[k]] = reads[k].czxid;
        } else if (reads[k].code == ZkCode::kNoNode) {
          gone = true;
        } else if (failure == ZkCode::kOk) {
          failure = reads[k].code;
        }
      }
      HoldersRead(job, gone, failure, std::move(czxid));
    });
    for (size_t k = 0; k < holders.size(); ++k) {
      job->zk->Exists(job->lock_path + "/" + job->nodes[holders[k]],
                      [g, k](ZkCode code, const ZkStat& stat) {
                        g->Answer(k, Read{code, static_cast<uint64_t>(stat.czxid)});
                      });
    }
  });
}

}  // namespace

void EngineShard::CheckToken(const std::string& name, uint64_t fencing_token, bool allow_stale,
                             std::function<void(absl::StatusOr<TokenCheck>)> done) const {
  if (absl::Status s = LockEngine::ValidateCheckToken(name, fencing_token); !s.ok()) return done(s);
  const std::string segment = EncodeLockName(name);
  ZkSession* zk = SessionOf(segment);
  if (!zk->connected()) {
    return done(absl::UnavailableError(
        "replica has no ZooKeeper session; the token's state is unknown"));
  }
  auto job = std::make_shared<TokenCheckJob>();
  job->zk = zk;
  job->lock_path = options_.root + "/" + segment;
  job->token = fencing_token;
  job->linearizable = !allow_stale;
  job->done = std::move(done);
  if (allow_stale) return ListForCheck(std::move(job));
  // The root always exists; a sync's effect is the session's, whatever
  // its path.
  zk->Sync(options_.root, [job](ZkCode code) {
    if (code != ZkCode::kOk) return job->Fail("sync", code);
    ListForCheck(job);
  });
}

}  // namespace turnstile
