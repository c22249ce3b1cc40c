// Lease-id and contender-name parsing, and the contender-info codec (all read
// from clients or from ZooKeeper nodes anyone with access could write).
// Invariants: an accepted lease id is re-formatted to itself; an accepted
// contender name round-trips its fields; decoded contender info re-encodes
// to data that decodes to the same fields.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/recipe/lock_name.h"

namespace {

bool SameInfo(const turnstile::ContenderInfo& a, const turnstile::ContenderInfo& b) {
  return a.owner == b.owner && a.metadata == b.metadata && a.replica_id == b.replica_id &&
         a.started_unix_ms == b.started_unix_ms && a.ttl_ms == b.ttl_ms &&
         a.lock_delay_ms == b.lock_delay_ms && a.renewals == b.renewals &&
         a.revoke_id == b.revoke_id && a.revoke_by == b.revoke_by &&
         a.revoke_reason == b.revoke_reason && a.identity == b.identity &&
         a.granted_unix_ms == b.granted_unix_ms;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  auto lease = turnstile::ParseLeaseId(in);
  if (lease.ok()) {
    if (turnstile::FormatLeaseId(lease->lock_segment, lease->contender.node) != in) std::abort();
    if (!turnstile::ValidateLockName(lease->lock_name).ok()) std::abort();
  }
  auto name = turnstile::ParseContenderName(in);
  if (name.has_value()) {
    if (name->node != in || name->uid.size() != 16) std::abort();
    auto again = turnstile::ParseContenderName(name->node);
    if (!again || again->sequence != name->sequence || again->kind != name->kind ||
        again->max_holders != name->max_holders) {
      std::abort();
    }
    // The prefix a create would use, plus the sequence, is the name itself.
    if (turnstile::ContenderNodePrefix(name->kind, name->uid, name->max_holders) +
            in.substr(in.size() - (name->sequence < -999999999 ? 11 : 10)) != in) {
      std::abort();
    }
    if ((name->kind == turnstile::ContenderKind::kSemaphore) != (name->max_holders > 0)) {
      std::abort();
    }
  }
  auto info = turnstile::DecodeContenderInfo(in);
  if (info.ok()) {
    auto again = turnstile::DecodeContenderInfo(turnstile::EncodeContenderInfo(*info));
    if (!again.ok() || !SameInfo(*info, *again)) std::abort();
  }
  (void)turnstile::DecodeLockMark(in);
  return 0;
}
