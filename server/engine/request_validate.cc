// LockEngine's request checks: every name, lease id, token, duration and
// size of every RPC, checked before the policy is asked and before anything
// touches ZooKeeper. Pure (no ZooKeeper, no gRPC), so the RPC adapter calls
// them first and the Acquire checks are also fuzzed
// (tests/fuzz/fuzz_acquire_open.cc).
#include "absl/strings/str_cat.h"
#include "client/common/flags.h"
#include "server/engine/lock_engine.h"
#include "server/recipe/lock_name.h"

namespace turnstile {

absl::Status LockEngine::ValidateMetadata(const std::map<std::string, std::string>& metadata,
                                          const EngineLimits& lim) {
  if (metadata.size() > lim.max_metadata_entries) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata has ", metadata.size(),
                     " entries; the limit is ", lim.max_metadata_entries));
  }
  for (const auto& [k, v] : metadata) {
    if (k.empty() || k.size() > lim.max_metadata_key_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata key \"", k.substr(0, 32), "\" is ", k.size(),
                       " bytes; keys must be 1..", lim.max_metadata_key_bytes));
    }
    if (v.size() > lim.max_metadata_value_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata value for \"", k, "\" is ", v.size(),
                       " bytes; the limit is ", lim.max_metadata_value_bytes));
    }
  }
  return absl::OkStatus();
}

absl::Status LockEngine::ValidateParams(const AcquireParams& p, const EngineLimits& lim) {
  if (absl::Status s = ValidateLockName(p.name); !s.ok()) return s;
  if (p.owner.size() > lim.max_owner_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "owner is ", p.owner.size(), " bytes; the limit is ", lim.max_owner_bytes));
  }
  if (absl::Status s = ValidateMetadata(p.metadata, lim); !s.ok()) return s;
  if (p.wait_timeout < Millis(0) || p.wait_timeout > lim.max_wait_timeout) {
    // The bracketed milliseconds are the form client libraries read to
    // learn the limit and wait in slices of it (protos/README.md); the
    // text before it is for people.
    return absl::InvalidArgumentError(absl::StrCat(
        "wait_timeout is ", FormatDuration(p.wait_timeout), "; it must be 0..",
        FormatDuration(lim.max_wait_timeout), " (--max-wait-timeout) [wait_timeout is ",
        p.wait_timeout.count(), "ms; it must be 0..", lim.max_wait_timeout.count(), "ms]"));
  }
  if (p.ttl != Millis(0) && (p.ttl < lim.min_ttl || p.ttl > lim.max_ttl)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ttl is ", FormatDuration(p.ttl), "; it must be 0 or ", FormatDuration(lim.min_ttl),
        "..", FormatDuration(lim.max_ttl), " (--max-ttl)"));
  }
  if (p.lock_delay < Millis(0) || p.lock_delay > kMaxLockDelay) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lock_delay is ", FormatDuration(p.lock_delay), "; it must be 0..",
        FormatDuration(kMaxLockDelay)));
  }
  if (p.revoke_reason.size() > kMaxRevokeReasonBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "revoke_reason is ", p.revoke_reason.size(), " bytes; the limit is ",
        kMaxRevokeReasonBytes));
  }
  if (p.kind == ContenderKind::kSemaphore) {
    if (p.max_holders < 1 || p.max_holders > lim.max_semaphore_holders) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_holders is ", p.max_holders, "; a semaphore's must be 1..",
          lim.max_semaphore_holders, " (--max-semaphore-holders)"));
    }
    // A lock-delay holds back the next grant of a whole lock, and
    // revoke_holders asks every holder ahead to let go: neither means what
    // a semaphore user would want (one permit), so both are refused rather
    // than half-done. Revoke a chosen holder by its lease id instead.
    if (p.lock_delay > Millis(0)) {
      return absl::InvalidArgumentError(
          "lock_delay is not supported for semaphores (max_holders > 0)");
    }
    if (p.revoke_holders) {
      return absl::InvalidArgumentError(
          "revoke_holders is not supported for semaphores (max_holders > 0): it would ask "
          "every holder to let go; Revoke one holder by its lease id instead");
    }
  } else if (p.max_holders != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_holders is ", p.max_holders, "; it is only for semaphores (kind SEMAPHORE or "
        "UNSPECIFIED), and must be 0 for exclusive and shared locks"));
  }
  return absl::OkStatus();
}

absl::Status LockEngine::ValidateLeaseId(const std::string& lease_id) {
  return ParseLeaseId(lease_id).status();
}

absl::Status LockEngine::ValidateRevoke(const std::string& lease_id, const std::string& requester,
                                        const std::string& reason, const EngineLimits& lim) {
  if (absl::Status s = ValidateLeaseId(lease_id); !s.ok()) return s;
  if (requester.size() > lim.max_owner_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "requester is ", requester.size(), " bytes; the limit is ", lim.max_owner_bytes));
  }
  if (reason.size() > kMaxRevokeReasonBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reason is ", reason.size(), " bytes; the limit is ", kMaxRevokeReasonBytes));
  }
  return absl::OkStatus();
}

absl::Status LockEngine::ValidateProclaim(const std::string& lease_id, uint64_t fencing_token,
                                          const std::map<std::string, std::string>& metadata,
                                          const EngineLimits& lim) {
  if (absl::Status s = ValidateLeaseId(lease_id); !s.ok()) return s;
  if (fencing_token == 0) {
    return absl::InvalidArgumentError(
        "fencing_token is 0; it must be the lease's token (Acquired.fencing_token)");
  }
  return ValidateMetadata(metadata, lim);
}

absl::Status LockEngine::ValidateCheckToken(const std::string& name, uint64_t fencing_token) {
  if (absl::Status s = ValidateLockName(name); !s.ok()) return s;
  if (fencing_token == 0) {
    return absl::InvalidArgumentError(
        "fencing_token is 0; it must be a token from Acquired.fencing_token");
  }
  return absl::OkStatus();
}

absl::Status LockEngine::ValidateList(const std::string& prefix, int limit) {
  if (limit < 0 || limit > kMaxListLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "limit is ", limit, "; it must be 0 (default ", kDefaultListLimit, ") or 1..",
        kMaxListLimit));
  }
  if (prefix.size() > kMaxLockNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefix is ", prefix.size(), " bytes; the limit is ", kMaxLockNameBytes));
  }
  return absl::OkStatus();
}

absl::Status LockEngine::ValidateKeepAlive(size_t lease_count, const EngineLimits& lim) {
  if (lease_count == 0 || lease_count > lim.max_keepalive_leases) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lease_ids has ", lease_count, " entries; it must have 1..", lim.max_keepalive_leases));
  }
  return absl::OkStatus();
}

}  // namespace turnstile
