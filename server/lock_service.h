// LockServiceImpl: the gRPC adapter over LockEngine.
//
// Translates turnstile.v1 messages to engine calls and absl::Status to
// grpc::Status (the codes are the same numbers). One reactor per stream owns
// its state and deletes itself in OnDone. The only file besides its .cc that
// sees generated gRPC headers. Thread-safe.
#ifndef TURNSTILE_SERVER_LOCK_SERVICE_H_
#define TURNSTILE_SERVER_LOCK_SERVICE_H_

#include <atomic>
#include <cstddef>

#include "server/authz.h"
#include "server/lock_engine.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile {

// Receives the service's measurements (metrics). Thread-safe, quick.
class ServiceObserver {
 public:
  virtual ~ServiceObserver() = default;
  // `method` is the RPC name (Acquire, Release, KeepAlive, Describe, List,
  // Revoke).
  virtual void OnRequestDone(const char* method, grpc::StatusCode code) = 0;
  // `delta` is +1 or -1; `kind` is "acquire" or "keepalive".
  virtual void OnStreamsChanged(const char* kind, int delta) = 0;
};

class LockServiceImpl final : public v1::LockService::CallbackService {
 public:
  // `max_streams` bounds open Acquire + KeepAlive streams on this replica.
  LockServiceImpl(LockEngine* engine, size_t max_streams)
      : engine_(engine), max_streams_(max_streams) {}

  grpc::ServerBidiReactor<v1::AcquireRequest, v1::AcquireEvent>* Acquire(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* ctx,
                                    const v1::ReleaseRequest* req,
                                    v1::ReleaseResponse* resp) override;
  grpc::ServerBidiReactor<v1::KeepAliveRequest, v1::KeepAliveResponse>*
  KeepAlive(grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* Revoke(grpc::CallbackServerContext* ctx,
                                   const v1::RevokeRequest* req,
                                   v1::RevokeResponse* resp) override;
  grpc::ServerUnaryReactor* Describe(grpc::CallbackServerContext* ctx,
                                     const v1::DescribeRequest* req,
                                     v1::DescribeResponse* resp) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* ctx,
                                 const v1::ListRequest* req,
                                 v1::ListResponse* resp) override;

  size_t open_streams() const { return open_streams_.load(); }

  // Reserves a stream slot; false when the replica is at max_streams.
  bool TryOpenStream();
  // RESOURCE_EXHAUSTED naming the flag and the limit.
  grpc::Status StreamLimitStatus() const;
  void CloseStream() { open_streams_.fetch_sub(1); }
  LockEngine* engine() const { return engine_; }
  // Set before serving; `observer` must outlive the service.
  void SetObserver(ServiceObserver* observer) { observer_ = observer; }
  void NoteRequest(const char* method, grpc::StatusCode code) const {
    if (observer_) observer_->OnRequestDone(method, code);
  }
  void NoteStreams(const char* kind, int delta) const {
    if (observer_) observer_->OnStreamsChanged(kind, delta);
  }

  // Mutual TLS and authorization; set before serving (both may be null:
  // no client certificates asked for, no policy). Must outlive the service.
  void SetAuth(ClientCertVerifier* verifier, PolicyFile* policy) {
    verifier_ = verifier;
    policy_ = policy;
  }
  // The caller's verified identity ("" without mutual TLS), or
  // UNAUTHENTICATED (audited).
  absl::StatusOr<std::string> Authenticate(grpc::CallbackServerContext* ctx,
                                           const char* method) const;
  // OK, or PERMISSION_DENIED naming identity, action and lock (audited).
  // Always OK without a policy.
  absl::Status Authorize(const std::string& identity, AuthzAction action,
                         absl::string_view lock) const;
  // For lease-id calls: the lock name in the lease id (nullopt if the id
  // does not parse: the engine reports that as INVALID_ARGUMENT).
  absl::Status AuthorizeLease(const std::string& identity, AuthzAction action,
                              const std::string& lease_id) const;
  // Finishes a unary call refused by Authenticate/Authorize (true) or
  // does nothing (false: `s` is OK).
  bool Refused(grpc::ServerUnaryReactor* reactor, const char* method,
               const absl::Status& s) const;
  std::shared_ptr<const AuthzPolicy> policy() const {
    return policy_ ? policy_->current() : nullptr;
  }

 private:
  ClientCertVerifier* verifier_ = nullptr;
  PolicyFile* policy_ = nullptr;
  LockEngine* const engine_;
  const size_t max_streams_;
  std::atomic<size_t> open_streams_{0};
  ServiceObserver* observer_ = nullptr;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_LOCK_SERVICE_H_
