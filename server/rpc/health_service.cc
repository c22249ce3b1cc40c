#include "server/rpc/health_service.h"

namespace turnstile {

using grpc::health::v1::HealthCheckResponse;

void HealthService::Start(grpc::ServerCompletionQueue* cq) {
  auto* async = &async_;
  CheckCall::Await(
      [async](grpc::ServerContext* ctx, grpc::health::v1::HealthCheckRequest* req,
              CheckCall::Responder* r, grpc::ServerCompletionQueue* cq, void* tag) {
        async->RequestCheck(ctx, req, r, cq, cq, tag);
      },
      cq, [this](CheckCall* call) { Check(call); });
}

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  absl::MutexLock l(&mu_);
  serving_[service] = serving;
}

void HealthService::SetServingStatus(bool serving) {
  absl::MutexLock l(&mu_);
  serving_[""] = serving;
  for (auto& [name, s] : serving_) s = serving;
}

void HealthService::Check(CheckCall* call) {
  bool known, serving = false;
  {
    absl::MutexLock l(&mu_);
    auto it = serving_.find(call->request().service());
    known = it != serving_.end();
    if (known) serving = it->second;
  }
  if (!known) {
    call->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"));
    return;
  }
  call->response()->set_status(serving ? HealthCheckResponse::SERVING
                                       : HealthCheckResponse::NOT_SERVING);
  call->Finish(grpc::Status::OK);
}

}  // namespace turnstile
