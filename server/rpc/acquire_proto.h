// AcquireOpen (the wire message) to AcquireParams (what the engine checks
// and runs). Pure; fuzzed with the engine's checks (tests/fuzz).
#ifndef TURNSTILE_SERVER_RPC_ACQUIRE_PROTO_H_
#define TURNSTILE_SERVER_RPC_ACQUIRE_PROTO_H_

#include "absl/status/statusor.h"
#include "server/engine/lock_engine.h"
#include "turnstile/v1/lock.pb.h"

namespace turnstile {

// INVALID_ARGUMENT for a kind this version does not know. Durations are
// clamped to +-2^30 s (then refused by the engine's range checks).
absl::StatusOr<AcquireParams> AcquireParamsFromProto(const v1::AcquireOpen& open);

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RPC_ACQUIRE_PROTO_H_
