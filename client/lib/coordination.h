// Recipes over turnstile::client::Client: leader election and
// all-or-nothing multi-lock. They use only the Client's public API.
//
// Election (etcd's election API, Curator's LeaderLatch): a candidate
// campaigns by acquiring the election's name as an exclusive lock with its
// value in the metadata key "value"; the holder is the leader, its fencing
// token the term (strictly increasing from leader to leader: pass it to
// whatever the leader writes to). Proclaim changes the value without giving
// up leadership; Resign releases. The leader is told at once (on_leadership
// false) when its leadership is in doubt (the replica lost ZooKeeper, or
// its refresh is overdue) or lost, before the hold can pass to anyone else;
// true again when a doubt clears. A revocation request (Revoke by lease
// id, or a candidate with revoke_holders) makes the leader step down
// (resign) unless ElectionOptions::resign_on_revoke is false.
//
// Multi-lock: Client::AcquireAll's free-function form AcquireAll takes
// several locks all-or-nothing under one deadline, always in byte order of
// the names, so two multi-locks can never deadlock each other.
#ifndef TURNSTILE_CLIENT_LIB_COORDINATION_H_
#define TURNSTILE_CLIENT_LIB_COORDINATION_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client.h"  // same directory: in the repository and installed

namespace turnstile::client {

// The metadata key the election recipes keep the leader's value under.
inline constexpr char kLeaderValueKey[] = "value";

struct Leader {
  std::string value;
  std::string owner;
  std::string identity;  // verified (mutual TLS), "" without
  uint64_t fencing_token = 0;  // the term
  int64_t granted_unix_ms = 0;  // 0 where the server does not know it
};

struct ElectionOptions {
  std::string owner;  // empty: ClientOptions.default_owner
  // Called with true when this candidate becomes leader (and again when a
  // doubt clears), false when leadership is in doubt or ends (the reason:
  // SUSPENDED, LOST: <reason>, RELEASED, RESIGNED, REVOKED). Never two
  // calls at once; false always follows a true. Runs on a library thread
  // and must not block; it may call IsLeader, Term and Resign.
  std::function<void(bool is_leader, const std::string& reason)> on_leadership;
  // Step down when asked to (REVOKE_REQUESTED).
  bool resign_on_revoke = true;
  // Called when someone asks this leader to step down (Revoke by lease id,
  // or a candidate with revoke_holders), before resigning if
  // resign_on_revoke. With resign_on_revoke false the leader decides, e.g.
  // stops its work first and then calls Resign. Library thread, must not
  // block; never at the same time as on_leadership.
  std::function<void(const std::string& requester, const std::string& reason)> on_revoke;
  // A lock-delay for the election's lock (AcquireOptions::lock_delay): a
  // leader that vanishes without resigning holds the next term back this
  // long.
  Millis lock_delay{0};
};

class Election {
 public:
  Election(Client* client, std::string name, ElectionOptions options = {});
  ~Election();  // resigns
  Election(const Election&) = delete;
  Election& operator=(const Election&) = delete;

  // Blocks until this candidate leads, with `value` as the leader's value,
  // or `timeout` passes (DEADLINE_EXCEEDED; Millis::max(): no limit). A
  // wait that a replica ends early (its --max-wait-timeout cap, a drain,
  // RESOURCE_EXHAUSTED, UNAVAILABLE) queues again inside, unseen.
  // FAILED_PRECONDITION if already leading. Other errors (INVALID_ARGUMENT,
  // PERMISSION_DENIED) are returned.
  absl::Status Campaign(const std::string& value, Millis timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Leading and not in doubt.
  bool IsLeader() const ABSL_LOCKS_EXCLUDED(mu_);
  // The term (fencing token) of the current or last leadership; 0 if none.
  uint64_t Term() const ABSL_LOCKS_EXCLUDED(mu_);
  // Its lease id ("" if none): for Revoke/Release by lease id elsewhere.
  std::string LeaseId() const ABSL_LOCKS_EXCLUDED(mu_);
  // Changes the leader's value (observers see it). FAILED_PRECONDITION if
  // not leading; the server's NOT_FOUND / FAILED_PRECONDITION if the hold
  // is gone or the term is stale.
  absl::Status Proclaim(const std::string& value) ABSL_LOCKS_EXCLUDED(mu_);
  // Gives up leadership (or nothing, if not leading).
  absl::Status Resign() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& name() const { return name_; }

 private:
  // Lock order: tell_mu_ -> mu_ -> the Lock's own (lock_->status()).
  // tell_mu_ serializes the user's callbacks (on_leadership, on_revoke) and
  // is held while they run; it is recursive because they may call Resign,
  // which takes it again on the same thread (and tells on_leadership
  // nested, before the release, as a leader must hear it first). It guards
  // no data but lock_'s place: lock_ is moved in or out (Campaign, Resign)
  // only under tell_mu_, so OnRevoke may use it after dropping mu_. Not a
  // lock clang's analysis sees (std::recursive_mutex carries no
  // attributes); mu_, which guards the data, is checked. mu_ is never held
  // while a callback runs or a Lock is released.
  void OnChange(uint64_t term, const LockStatus& status) ABSL_LOCKS_EXCLUDED(mu_);
  void OnRevoke(uint64_t term, const std::string& requester, const std::string& reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Tells on_leadership (serialized; only changes). Under tell_mu_.
  void Tell(bool leader, const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);

  Client* const client_;
  const std::string name_;
  const ElectionOptions options_;
  std::recursive_mutex tell_mu_;
  mutable absl::Mutex mu_;
  std::optional<Lock> lock_ ABSL_GUARDED_BY(mu_);
  uint64_t term_ ABSL_GUARDED_BY(mu_) = 0;
  bool leader_ ABSL_GUARDED_BY(mu_) = false;  // as last told
};

// The current leader of the election `name`; nullopt if none.
absl::StatusOr<std::optional<Leader>> CurrentLeader(Client* client, const std::string& name);

// Observes the leader of `name`: on_leader gets the leader (nullopt: none)
// at once and after every change of leader or value, with known = false
// while the state is unknown (then leader is nullopt).
absl::StatusOr<std::unique_ptr<Observation>> ObserveLeader(
    Client* client, const std::string& name,
    std::function<void(const std::optional<Leader>& leader, bool known)> on_leader);

// Several locks held together (AcquireAll). Releasing it (or destroying
// it) releases them all. Losing any one counts as losing the set.
class MultiLock {
 public:
  MultiLock() = default;
  MultiLock(MultiLock&&) noexcept = default;
  MultiLock& operator=(MultiLock&&) noexcept = default;
  ~MultiLock() { (void)Release(); }

  // The names in the order they were taken (byte order).
  std::vector<std::string> names() const;
  uint64_t fencing_token(const std::string& name) const;  // 0 if not one of them
  // kLost if any is lost or released by someone, kSuspended if any is in
  // doubt, else kHeld (kReleased once released).
  LockState state() const;
  std::vector<Lock>& locks() { return locks_; }
  // Releases every lock (in reverse order); the first error, if any.
  absl::Status Release();

 private:
  friend absl::StatusOr<MultiLock> AcquireAll(Client*, const std::vector<std::string>&,
                                              const AcquireOptions&);
  std::vector<Lock> locks_;
  bool released_ = false;
};

// Takes every lock in `names` or none, within options.wait_timeout in all
// (0: try each once). Names are taken in byte order; duplicates are
// INVALID_ARGUMENT (before any call). On any failure every lock already
// taken is released before this returns the failure. `options` apply to
// each lock; options.on_change is called for each lock's changes (its
// LockStatus.message starts with the lock's name).
absl::StatusOr<MultiLock> AcquireAll(Client* client, const std::vector<std::string>& names,
                                     const AcquireOptions& options);

// Abandons every wait for a lock in this process, now and from now on: a
// Client::Acquire waiting for its grant (and so AcquireAll and
// Election::Campaign) cancels its stream, so a live replica deletes the
// waiting node at once, and returns CANCELLED; a later Acquire returns
// CANCELLED without asking. Holds already granted are not touched. For a
// program being stopped while it waits (the CLI on SIGINT or SIGTERM).
// Irreversible; thread-safe (not async-signal-safe: call it from a thread,
// e.g. one that takes signals with sigwait).
void AbandonWaits();
// Whether AbandonWaits was called.
bool WaitsAbandoned();

// The names in the order AcquireAll takes them, or INVALID_ARGUMENT (empty
// list, an empty name, a duplicate). Pure.
absl::StatusOr<std::vector<std::string>> CanonicalLockOrder(std::vector<std::string> names);

// The longest wait a replica allows, from its INVALID_ARGUMENT for a
// wait_timeout above it ("wait_timeout is 2h; it must be 0..1h
// (--max-wait-timeout) [wait_timeout is 7200000ms; it must be 0..3600000ms]",
// or an older replica's bracketed part alone), or nullopt. Pure.
std::optional<Millis> MaxWaitFromError(const absl::Status& status);

}  // namespace turnstile::client

#endif  // TURNSTILE_CLIENT_LIB_COORDINATION_H_
