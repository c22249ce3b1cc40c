#include "client/lib/proto_convert.h"

#include <algorithm>
#include <cstdint>

namespace turnstile::client::internal {

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

void SetDuration(Millis d, google::protobuf::Duration* out) {
  out->set_seconds(d.count() / 1000);
  out->set_nanos(static_cast<int32_t>((d.count() % 1000) * 1000000));
}

Millis FromDuration(const google::protobuf::Duration& d) {
  constexpr int64_t kMaxSeconds = int64_t{1} << 30;
  int64_t s = std::max(-kMaxSeconds, std::min(kMaxSeconds, d.seconds()));
  return Millis(s * 1000 + d.nanos() / 1000000);
}

Millis Left(Clock::time_point deadline, Clock::time_point now) {
  if (deadline <= now) return Millis(0);
  return std::chrono::duration_cast<Millis>(deadline - now);
}

Contender ConvertContender(const v1::Contender& c) {
  Contender out;
  out.owner = c.owner();
  out.metadata.insert(c.metadata().begin(), c.metadata().end());
  out.fencing_token = c.fencing_token();
  out.replica_id = c.replica_id();
  out.identity = c.identity();
  out.position = c.position();
  out.kind = c.kind() == v1::LOCK_KIND_SHARED      ? "SHARED"
             : c.kind() == v1::LOCK_KIND_SEMAPHORE ? "SEMAPHORE"
                                                   : "EXCLUSIVE";
  out.max_holders = c.max_holders();
  if (c.has_granted()) {
    out.granted_unix_ms = c.granted().seconds() * 1000 + c.granted().nanos() / 1000000;
  }
  return out;
}

}  // namespace turnstile::client::internal
