// Client::Observe's running observation. Internal to the client library.
#ifndef TURNSTILE_CLIENT_LIB_OBSERVATION_H_
#define TURNSTILE_CLIENT_LIB_OBSERVATION_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "client/lib/client.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile::client::internal {

// Starts observing `name` on a thread of the observation's own (see
// Client::Observe); the returned object's destructor or Stop ends it.
std::unique_ptr<Observation> StartObservation(
    std::shared_ptr<v1::LockService::Stub> stub, std::string name,
    std::function<void(const LockObservation&)> on_state,
    std::function<void(const absl::Status&)> on_end);

}  // namespace turnstile::client::internal

#endif  // TURNSTILE_CLIENT_LIB_OBSERVATION_H_
