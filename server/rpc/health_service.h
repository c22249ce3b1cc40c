// grpc.health.v1.Health (Check) on the service's completion queue.
//
// gRPC's built-in health service is a callback service, and any callback
// service brings back the two hand-off threads that server/rpc/async_rpc.h
// avoids; this one answers Check on the one queue thread. Statuses are
// per service name, as the built-in one keeps them: Check of an unknown
// name is NOT_FOUND. Watch is not served (UNIMPLEMENTED): probes (Kubernetes,
// grpc_health_probe, `turnstile health`) use Check. Thread-safe.
#ifndef TURNSTILE_SERVER_RPC_HEALTH_SERVICE_H_
#define TURNSTILE_SERVER_RPC_HEALTH_SERVICE_H_

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/rpc/async_rpc.h"

namespace turnstile {

class HealthService {
 public:
  void Register(grpc::ServerBuilder* builder) { builder->RegisterService(&async_); }
  void Start(grpc::ServerCompletionQueue* cq);
  // Sets one service's status (creating it).
  void SetServingStatus(const std::string& service, bool serving) ABSL_LOCKS_EXCLUDED(mu_);
  // Sets every known service's status, "" included.
  void SetServingStatus(bool serving) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using CheckCall =
      rpc::UnaryCall<grpc::health::v1::HealthCheckRequest, grpc::health::v1::HealthCheckResponse>;
  void Check(CheckCall* call) ABSL_LOCKS_EXCLUDED(mu_);

  grpc::health::v1::Health::AsyncService async_;
  absl::Mutex mu_;  // a leaf
  std::map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RPC_HEALTH_SERVICE_H_
