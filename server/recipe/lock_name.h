// Naming of contenders and leases as they appear in ZooKeeper, and what
// their nodes hold. Every function here is a pure function over strings:
// contender node names and lease ids are parsed strictly, and anything we
// would not have produced ourselves is rejected (or, for foreign children,
// reported as nullopt). Lock names themselves (validation, the encoding into
// a path segment) are shared with the clients: client/common/lock_name.h.
//
// Layout in ZooKeeper: /<root>/<EncodeLockName(name)>/<contender-node>, where
// the contender node is created EPHEMERAL_SEQUENTIAL from the prefix
// ContenderNodePrefix(kind, uid) and ZooKeeper appends "%010d" of the parent's
// cversion.

#ifndef TURNSTILE_SERVER_RECIPE_LOCK_NAME_H_
#define TURNSTILE_SERVER_RECIPE_LOCK_NAME_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/common/lock_name.h"

namespace turnstile {

// Lease ids carry an encoded segment (at most 3 * kMaxLockNameBytes bytes)
// plus a contender node name, so 1024 bytes is a generous but finite bound.
inline constexpr size_t kMaxLeaseIdBytes = 1024;

// Node-name letters 'x' (exclusive), 's' (shared), 'n' (an N-holder
// semaphore: "n<N>-...", N in its name).
enum class ContenderKind { kExclusive, kShared, kSemaphore };

// A parsed contender node name "<k>-<uid>-<seq>": k is 'x', 's', or 'n'
// followed by N in decimal (1..kMaxSemaphoreHoldersEver, no leading zero);
// uid is exactly 16 lowercase hex chars and seq is exactly what ZooKeeper
// appended, i.e. printf("%010d") of a signed 32-bit int.
struct ContenderName {
  ContenderKind kind;
  std::string uid;
  int32_t sequence;
  std::string node;  // the full node name as given
  int32_t max_holders = 0;  // kSemaphore: its N; 0 otherwise
};

// The path suffix to pass to a sequential create: "x-<uid>-", "s-<uid>-" or
// "n<max_holders>-<uid>-".
// REQUIRES: kind != kSemaphore, or 1 <= max_holders <= kMaxSemaphoreHoldersEver.
std::string ContenderNodePrefix(ContenderKind kind, absl::string_view uid,
                                int32_t max_holders = 0);

// nullopt for any name that is not a contender name (a foreign child of a
// lock node must be ignored, never crash us).
std::optional<ContenderName> ParseContenderName(absl::string_view node);

// A contender uid's length: 16 lowercase hex chars.
inline constexpr size_t kContenderUidLen = 16;
// A new random uid of kContenderUidLen lowercase hex chars (64 random bits).
std::string NewContenderUid();

// A lease id names one contender node:
// "<encoded-lock-segment>/<contender-node>".
struct LeaseId {
  std::string lock_segment;  // encoded
  std::string lock_name;     // decoded
  ContenderName contender;
};

std::string FormatLeaseId(absl::string_view lock_segment,
                          absl::string_view contender_node);

// INVALID_ARGUMENT (field "lease_id") for an empty id, one longer than
// kMaxLeaseIdBytes, a missing '/', a bad lock segment, or a node that is not
// a contender name.
absl::StatusOr<LeaseId> ParseLeaseId(absl::string_view lease_id);

// What a contender node's data holds, for introspection (Describe).
struct ContenderInfo {
  std::string owner;
  std::map<std::string, std::string> metadata;
  std::string replica_id;
  int64_t started_unix_ms = 0;
  int64_t ttl_ms = 0;
  // Written by KeepAlive and Revoke through any replica (read-modify-write
  // with the node's version); the owning replica follows them. Optional
  // lines, written only when set, so older readers ignore them.
  // The holder's lock-delay (0 = none): after its hold ends involuntarily,
  // the next grant waits this long.
  int64_t lock_delay_ms = 0;
  int64_t renewals = 0;       // remote KeepAlives so far
  // The grant mark of a semaphore holder (issue 21): when it was granted
  // (wall clock of its replica), written once by the holder's replica; its
  // data watch wakes the waiter behind it. 0 = not (yet) granted.
  int64_t granted_unix_ms = 0;
  // Proclaims so far (the Proclaim RPC replaced the metadata): the owning
  // replica tells a proclaim from a renewal by it.
  int64_t proclaims = 0;
  int64_t revoke_id = 0;      // revocation requests so far (0 = none)
  std::string revoke_by;      // the latest request's requester
  std::string revoke_reason;  // and reason
  // The caller's verified identity (mutual TLS), "" without it. Unlike
  // `owner`, never taken from anything the caller sets.
  std::string identity;
};

// Text encoding, one '\n'-terminated line each:
//   turnstile-contender v1
//   owner=<escaped>
//   replica_id=<escaped>
//   started_unix_ms=<decimal>
//   ttl_ms=<decimal>
//   lock_delay_ms=<decimal>     (only when > 0)
//   renewals=<decimal>          (only when > 0)
//   granted_unix_ms=<decimal>   (only when > 0: a semaphore holder's grant mark)
//   proclaims=<decimal>         (only when > 0)
//   revoke_id=<decimal>         (only when > 0; then also the next two)
//   revoke_by=<escaped>
//   revoke_reason=<escaped>
//   identity=<escaped>          (only when non-empty)
//   meta.<escaped key>=<escaped value>     (one per entry, sorted by key)
// Escaping turns '%', '=', and every byte outside 0x20..0x7E into %XX
// (uppercase hex), so arbitrary byte strings round-trip exactly.
std::string EncodeContenderInfo(const ContenderInfo& info);

// INVALID_ARGUMENT on anything EncodeContenderInfo would not produce: unknown
// version, bad or needless escapes, missing or duplicate fields, malformed
// integers, missing final newline. Lines with unknown keys are ignored, so a
// newer writer may add fields without breaking older readers.
absl::StatusOr<ContenderInfo> DecodeContenderInfo(absl::string_view data);

// The data of a lock's own node (lock-delay, issue 12), one line each:
//   turnstile-lock v1
//   released=<contender node>        the last hold released cleanly
//   delay_until_unix_ms=<decimal>    in lock-delay until then (wall clock)
// Written by a clean release of a hold with a lock-delay (in the same
// transaction as its delete) and by a replica that starts a lock-delay.
struct LockMark {
  std::string released;
  int64_t delay_until_unix_ms = 0;
};
std::string EncodeLockMark(const std::string& released, int64_t delay_until_unix_ms);
// Lenient: anything else (empty data, an older format) is an empty mark.
LockMark DecodeLockMark(absl::string_view data);

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RECIPE_LOCK_NAME_H_
