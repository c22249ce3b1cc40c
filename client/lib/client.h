// turnstile C++ client library.
//
// A Client talks to one turnstile target (a replica address, or a
// load-balanced name). Client::Acquire returns a held Lock or a status. A Lock
// is a move-only RAII handle: destroying it (or calling Release) releases the
// lock. While held it exposes the fencing token and lease id, keeps a TTL
// lease alive by itself, and tells the caller when the hold is in doubt
// (SUSPENDED) or gone (LOST) — through a callback and a queryable state that
// includes how long the hold is still known to be valid.
//
// Reentrancy (Curator InterProcessMutex semantics): when `reentrant` is set,
// acquiring a lock that the same Client already holds under the same owner
// does not queue behind itself; it returns another handle to the same hold and
// counts up. The lock is released when the last handle is released.
// Refinements: both the holding and the reentering Acquire must set
// `reentrant` (and use the same Client and effective owner); only holds
// already granted are shared (a concurrent first Acquire queues). The
// reentering call's wait_timeout/ttl/metadata are ignored; its on_change is
// added. A released handle reports hold_count() 0 and state kReleased (its
// on_change gets kReleased); the others keep the hold.
//
// Release: sends `release` and waits (at most 10 s, then cancels the stream
// and returns DEADLINE_EXCEEDED) for RELEASED and the stream's end. After
// kLost it returns OK without contacting the server and the state stays
// kLost. Called from inside on_change or on_revoke it does not wait.
//
// Thread-safety: Client is thread-safe. A Lock may be used from one thread at
// a time. A hold costs no thread: the library runs one thread per process
// (started with the first hold, shared by every Client, ended when the last
// Client and Lock are gone) that polls the gRPC completion queue of all
// streams and runs the timers, the KeepAlive renewals and the callbacks of
// all Locks. The library uses no gRPC callback API, so it brings none of
// gRPC's callback ("nexting") threads into the process; gRPC's own timer
// and executor threads remain. on_change and on_revoke run on that library
// thread, never under an internal lock, and must not block: a blocked
// callback delays the stream events, the callbacks and the overdue-refresh
// checks of every other Lock of the process. on_queued runs on the thread
// calling Acquire, before Acquire returns.
// TTL leases are renewed by the Client: destroy Locks before their Client
// (a Lock that outlives it still works, but its lease is no longer
// renewed).
#ifndef TURNSTILE_CLIENT_LIB_CLIENT_H_
#define TURNSTILE_CLIENT_LIB_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace turnstile::client {

using Millis = std::chrono::milliseconds;

struct ClientOptions {
  // gRPC target, e.g. "127.0.0.1:7400" or "dns:///turnstile:7400".
  std::string target = "127.0.0.1:7400";
  // PEM file with CA certificates: set = TLS, empty = plaintext.
  std::string tls_ca_file;
  // PEM client certificate and key (both or neither; needs tls_ca_file):
  // mutual TLS, for replicas run with --tls-client-ca-file. The server
  // knows the caller by this certificate, not by owner.
  std::string tls_cert_file;
  std::string tls_key_file;
  // The name the server's certificate must carry, when it is not the
  // target's host (e.g. a target listing several addresses,
  // "ipv4:10.0.0.1:7400,10.0.0.2:7400", served with a certificate for
  // "turnstile"). Empty: the target's host.
  std::string tls_server_name;
  // When tls_ca_file, tls_cert_file and tls_key_file are all empty, they
  // are read from TURNSTILE_TLS_CA_FILE, TURNSTILE_TLS_CERT_FILE and
  // TURNSTILE_TLS_KEY_FILE (unset: plaintext), like the CLI's flags.
  // Owner recorded on every Acquire unless AcquireOptions.owner is set.
  std::string default_owner;
  // An Acquire whose wait ends UNAVAILABLE (replica draining, without
  // ZooKeeper, or unreachable; or CANCELLED by a replica shutting down) is
  // retried with backoff (50 ms doubling to
  // 1 s) until its wait_timeout; with a load-balanced target the retry lands
  // on another replica. The retry queues anew. Try-once is never retried.
  bool retry_unavailable = true;
};

enum class LockState {
  kHeld,       // granted and not in doubt
  kSuspended,  // in doubt: the replica lost ZooKeeper, or the replica's
               // refresh (STILL_HELD) is overdue; held for at most valid_for()
  kLost,       // the hold is gone (lost_reason says why); stop using it
  kReleased,   // released by this handle (or the last reentrant handle)
};
const char* LockStateName(LockState s);

struct LockStatus {
  LockState state = LockState::kHeld;
  // How long the hold is still known valid from now: the earliest of the
  // validity the replica's latest refresh gave (ACQUIRED / STILL_HELD:
  // about a session timeout, renewed every fifth of it), for TTL leases the
  // time to the next required renewal, and while suspended the safe time
  // minus what has elapsed; 0 once lost or released. Millis::max() only
  // against a server that sends no refreshes, without TTL, not suspended.
  Millis valid_for{0};
  // For kLost: SESSION_EXPIRED, LEASE_EXPIRED, DELETED, SHUTDOWN,
  // CONNECTION (the stream to the replica broke), REFRESH_OVERDUE (the
  // replica stopped refreshing the hold, e.g. it froze, and its validity ran
  // out; the library then cancels the stream). A hold whose refresh is
  // overdue is kSuspended first, and kHeld again if a refresh comes in time.
  std::string lost_reason;
  std::string message;
};

struct AcquireOptions {
  Millis wait_timeout{0};  // 0 = try once
  Millis ttl{0};           // 0 = held while connected
  std::string owner;       // empty = ClientOptions.default_owner
  std::map<std::string, std::string> metadata;
  bool reentrant = false;
  // A shared (read) hold: coexists with other shared holders of the name,
  // excludes exclusive ones; FIFO across both kinds (LOCK_KIND_SHARED).
  bool shared = false;
  // Above 0: one of an N-holder (counting) semaphore with N = max_holders
  // (LOCK_KIND_SEMAPHORE): at most N hold at once, FIFO. Every contender of
  // the name must ask the same N (FAILED_PRECONDITION otherwise); not with
  // `shared`, `lock_delay` or `revoke_holders`.
  int32_t max_holders = 0;
  // Lock-delay (0..60 s): if this hold ends involuntarily (lost, released by
  // lease id by someone else, this process gone without releasing), the
  // next grant waits this long. A clean Release hands over at once.
  Millis lock_delay{0};
  // Once queued, ask the holders ahead to let go (they get on_revoke /
  // REVOKE_REQUESTED with this Acquire's owner and revoke_reason).
  bool revoke_holders = false;
  std::string revoke_reason;
  // Called (on a library thread, must not block) when someone asks this
  // holder to let go (Client::Revoke, or a waiter with revoke_holders).
  // The holder decides: Release, or keep the lock.
  std::function<void(const std::string& requester, const std::string& reason)> on_revoke;
  // Called with the queue position while waiting (1 = next in line).
  std::function<void(int64_t position)> on_queued;
  // Called on every state change after the grant (kSuspended, kHeld again on
  // resume, kLost, kReleased).
  std::function<void(const LockStatus&)> on_change;
};

class Lock;

// One contender of a lock, as Describe shows it.
struct Contender {
  std::string owner;
  std::map<std::string, std::string> metadata;
  uint64_t fencing_token = 0;
  std::string replica_id;
  std::string identity;  // verified (mutual TLS), "" without
  int64_t position = 0;  // 1-based, queue order
  std::string kind;      // "EXCLUSIVE", "SHARED" or "SEMAPHORE"
  int32_t max_holders = 0;  // a semaphore contender's N
  // When a holder was granted (wall clock, ms since the epoch), where the
  // server knows it (see Contender.granted in lock.proto); 0 if not.
  int64_t granted_unix_ms = 0;
};
struct Description {
  std::string name;
  int32_t max_holders = 0;  // a semaphore's N; 0 for other locks
  std::vector<Contender> holders;  // in grant order
  std::vector<Contender> waiters;  // in queue order
};
// One state of an observed lock (Client::Observe).
struct LockObservation {
  // false: the replica serving the observation has no ZooKeeper contact,
  // or the library is re-observing after the stream broke: the holders
  // are unknown (empty). A known state follows.
  bool known = false;
  std::string name;
  std::vector<Contender> holders;  // grant order (a mutex: the leader, if any)
  int64_t waiters = 0;
  int32_t max_holders = 0;
  std::string message;  // !known: why
};

// A running Client::Observe; destroying it (or Stop) ends it.
class Observation {
 public:
  virtual ~Observation() = default;
  // Ends the observation; on_state is not called after Stop returns.
  // Must not be called from on_state.
  virtual void Stop() = 0;
};

struct LockNames {
  std::vector<std::string> names;
  bool truncated = false;  // more matched than `limit`
};

// Whether a fencing token still belongs to a hold (Client::CheckToken).
struct TokenCheck {
  enum class Verdict {
    kCurrent,     // a holder of the lock has this token
    kSuperseded,  // no hold has it, and none ever will again
    kWaiting,     // a contender that was never granted has it (refuse it too)
  };
  Verdict verdict = Verdict::kSuperseded;
  // The highest token among the lock's holders (0: none).
  uint64_t highest_holder_token = 0;
  // False when allow_stale skipped ZooKeeper's sync.
  bool linearizable = false;
  bool current() const { return verdict == Verdict::kCurrent; }
};
// "CURRENT", "SUPERSEDED", "WAITING".
const char* VerdictName(TokenCheck::Verdict verdict);

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();

  // Blocks until the lock is held or the wait ends: DEADLINE_EXCEEDED (wait
  // timeout), FAILED_PRECONDITION (try-once on a held lock), or the server's
  // error (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE once retries
  // ran out of wait time — see ClientOptions::retry_unavailable, ...).
  absl::StatusOr<Lock> Acquire(const std::string& name, const AcquireOptions& options);

  // Release / KeepAlive by lease id (e.g. a lease handed over by another
  // process). NOT_FOUND if the lease is gone.
  absl::Status Release(const std::string& lease_id);
  // Asks the holder of `lease_id` to let go (requester: default_owner).
  // NOT_FOUND if the lease is gone.
  absl::Status Revoke(const std::string& lease_id, const std::string& reason);
  // Holders and waiters of `name`; nullopt if nobody holds or waits for it
  // (a free lock is an answer, not an error: the server's NOT_FOUND).
  absl::StatusOr<std::optional<Description>> Describe(const std::string& name);
  // Names of locks with holders or waiters, in byte order, starting with
  // `prefix`; limit 0 = the server's default (1000).
  absl::StatusOr<LockNames> List(const std::string& prefix, int limit = 0);
  // Replaces the metadata of the hold `lease_id` (with its fencing token)
  // without giving it up: NOT_FOUND if the lease is gone,
  // FAILED_PRECONDITION if the token is not the lease's (stale).
  absl::Status Proclaim(const std::string& lease_id, uint64_t fencing_token,
                        const std::map<std::string, std::string>& metadata);
  // For a resource server: whether `fencing_token` (from a holder's
  // ACQUIRED) still belongs to a hold of `name`. Apply a write only when
  // current(). Linearizable unless `allow_stale` (then the view of the
  // ZooKeeper server the replica talks to, possibly seconds old).
  // INVALID_ARGUMENT (bad name, token 0), PERMISSION_DENIED (policy action
  // `describe`), UNAVAILABLE (the answer is unknown: refuse the write).
  absl::StatusOr<TokenCheck> CheckToken(const std::string& name, uint64_t fencing_token,
                                        bool allow_stale = false);
  // Observes the holders of `name`: on_state gets the current state at
  // once and again after every change (the latest state when changes come
  // faster than they are read). When the stream fails (UNAVAILABLE: a
  // replica draining or gone), on_state gets an unknown state and the
  // library observes again (backoff 50 ms..1 s; through a multi-address
  // target, another replica). on_state runs on a thread of the
  // observation's own and must not block for long. INVALID_ARGUMENT for an
  // empty name; errors the server gives for the name itself
  // (INVALID_ARGUMENT, PERMISSION_DENIED) end the observation: on_end gets
  // them (if set).
  absl::StatusOr<std::unique_ptr<Observation>> Observe(
      const std::string& name, std::function<void(const LockObservation&)> on_state,
      std::function<void(const absl::Status&)> on_end = nullptr);

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

class Lock {
 public:
  Lock(Lock&&) noexcept;
  Lock& operator=(Lock&&) noexcept;
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;
  ~Lock();  // Release()s

  uint64_t fencing_token() const;
  const std::string& lease_id() const;
  const std::string& name() const;
  LockStatus status() const;
  // Holds reentrantly by this many handles (1 = not reentered).
  int hold_count() const;
  // Releases this handle; the lock itself when it is the last handle. Waits
  // for the server's RELEASED. Idempotent.
  absl::Status Release();

  class Hold;

 private:
  friend class Client;
  explicit Lock(std::shared_ptr<Hold> hold);
  std::shared_ptr<Hold> hold_;
};

}  // namespace turnstile::client

#endif  // TURNSTILE_CLIENT_LIB_CLIENT_H_
