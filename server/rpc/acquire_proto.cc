#include "server/rpc/acquire_proto.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace turnstile {

namespace {

Millis FromDuration(const google::protobuf::Duration& d) {
  constexpr int64_t kMaxSeconds = int64_t{1} << 30;
  int64_t s = std::max(-kMaxSeconds, std::min(kMaxSeconds, d.seconds()));
  return Millis(s * 1000 + d.nanos() / 1000000);
}

}  // namespace

absl::StatusOr<AcquireParams> AcquireParamsFromProto(const v1::AcquireOpen& open) {
  AcquireParams p;
  p.name = open.name();
  p.owner = open.owner();
  p.metadata.insert(open.metadata().begin(), open.metadata().end());
  p.wait_timeout = FromDuration(open.wait_timeout());
  p.ttl = FromDuration(open.ttl());
  p.revoke_holders = open.revoke_holders();
  p.lock_delay = FromDuration(open.lock_delay());
  p.revoke_reason = open.revoke_reason();
  p.max_holders = open.max_holders();
  switch (open.kind()) {
    case v1::LOCK_KIND_UNSPECIFIED:
      p.kind = open.max_holders() > 0 ? ContenderKind::kSemaphore : ContenderKind::kExclusive;
      break;
    case v1::LOCK_KIND_EXCLUSIVE:
      p.kind = ContenderKind::kExclusive;
      break;
    case v1::LOCK_KIND_SEMAPHORE:
      p.kind = ContenderKind::kSemaphore;
      break;
    case v1::LOCK_KIND_SHARED:
      p.kind = ContenderKind::kShared;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("kind: unknown value ", open.kind()));
  }
  return p;
}

}  // namespace turnstile
