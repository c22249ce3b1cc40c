// Between the library's types (client.h) and lock.proto's messages: status
// codes, durations, contenders. Internal to the client library.
#ifndef TURNSTILE_CLIENT_LIB_PROTO_CONVERT_H_
#define TURNSTILE_CLIENT_LIB_PROTO_CONVERT_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "client/lib/client.h"
#include "client/lib/event_loop.h"
#include "turnstile/v1/lock.pb.h"

namespace turnstile::client::internal {

using Clock = EventLoop::Clock;

absl::Status FromGrpc(const grpc::Status& s);

void SetDuration(Millis d, google::protobuf::Duration* out);

// Clamped to about 34 years, so adding it to a time point cannot overflow.
Millis FromDuration(const google::protobuf::Duration& d);

// From `now` to `deadline`; 0 once it has passed.
Millis Left(Clock::time_point deadline, Clock::time_point now);

Contender ConvertContender(const v1::Contender& c);

}  // namespace turnstile::client::internal

#endif  // TURNSTILE_CLIENT_LIB_PROTO_CONVERT_H_
