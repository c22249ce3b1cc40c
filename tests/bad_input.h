// One call of every LockService RPC with input that is bad whoever sends it:
// each must be answered INVALID_ARGUMENT, before the caller's identity, the
// authorization policy or a quota is asked (issue 40). validation_test runs
// the table without a policy (and with a permissive one in its mTLS run);
// authz_test runs it as identities the policy denies everything.
#ifndef TURNSTILE_TESTS_BAD_INPUT_H_
#define TURNSTILE_TESTS_BAD_INPUT_H_

#include <functional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile::testing {

struct BadInputCall {
  std::string rpc;   // "Acquire", "Release", ...
  std::string what;  // what is bad, for the failure message
  // Makes the call (10 s deadline); KeepAlive's per-lease answer comes back
  // as the status of its entry.
  std::function<grpc::Status(v1::LockService::Stub*)> call;
};

// `lock`: the lock the well-formed fields name (lease ids are made for it),
// so a policy that denies it would refuse the call if it were asked first.
std::vector<BadInputCall> BadInputCalls(const std::string& lock);

// The RPCs of the LockService, by name (the table must cover each).
std::vector<std::string> LockServiceMethods();

}  // namespace turnstile::testing

#endif  // TURNSTILE_TESTS_BAD_INPUT_H_
