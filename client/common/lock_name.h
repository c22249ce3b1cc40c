// Lock names: what a caller may name a lock, and the reversible encoding of
// a name into one ZooKeeper path segment. Shared by the replica (which keeps
// a lock at /<root>/<EncodeLockName(name)>), the CLI and the bench (which
// check names and limits before they send them, and find a lock's node).
// Pure functions over strings; thread-safe.
//
// The names of contenders and leases inside a lock, and what their nodes
// hold, are the replica's own: server/lock_name.h.

#ifndef TURNSTILE_CLIENT_COMMON_LOCK_NAME_H_
#define TURNSTILE_CLIENT_COMMON_LOCK_NAME_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace turnstile {

inline constexpr size_t kMaxLockNameBytes = 256;

// The largest N a semaphore may have: a semaphore contender's node name
// carries it, and the replica's --max-semaphore-holders is at most this.
inline constexpr int32_t kMaxSemaphoreHoldersEver = 100000;

// INVALID_ARGUMENT if `name` is empty, longer than kMaxLockNameBytes bytes,
// not valid UTF-8, or contains control characters U+0000..U+001F or
// U+007F..U+009F. The message names field "name" and the limit.
absl::Status ValidateLockName(absl::string_view name);

// Reversible escaping of a valid lock name into ONE valid ZooKeeper path
// segment. Bytes in [A-Za-z0-9] and "_-.:@+=,~" pass through, every other
// byte becomes %XX (uppercase hex). A name consisting only of dots has every
// dot escaped, because ZooKeeper forbids the segments "." and "..".
// REQUIRES: ValidateLockName(name).ok()
std::string EncodeLockName(absl::string_view name);

// Inverse of EncodeLockName. INVALID_ARGUMENT for any segment EncodeLockName
// cannot produce, so the encoding is canonical:
// EncodeLockName(*DecodeLockName(s)) == s for every accepted s.
absl::StatusOr<std::string> DecodeLockName(absl::string_view segment);

}  // namespace turnstile

#endif  // TURNSTILE_CLIENT_COMMON_LOCK_NAME_H_
