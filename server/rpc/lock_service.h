// LockServiceImpl: the gRPC adapter over LockEngine.
//
// Translates turnstile.v1 messages to engine calls and absl::Status to
// grpc::Status (the codes are the same numbers). Served with gRPC's
// completion-queue API on one queue and one thread (server/rpc/async_rpc.h says
// why); one call object per stream owns its state and goes in OnDone.
// Thread-safe.
#ifndef TURNSTILE_SERVER_RPC_LOCK_SERVICE_H_
#define TURNSTILE_SERVER_RPC_LOCK_SERVICE_H_

#include <atomic>
#include <cstddef>

#include "server/rpc/async_rpc.h"
#include "server/rpc/authz.h"
#include "server/rpc/client_cert.h"
#include "server/engine/lock_engine.h"
#include "server/engine/lock_observers.h"
#include "server/rpc/service_observer.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile {

class LockServiceImpl;

// One stream's place in its identity's quotas (server/rpc/quota.h): what
// it counts for, given back by Close (or the destructor). Used on the
// stream's own calls only.
class QuotaSlot {
 public:
  QuotaSlot() = default;
  QuotaSlot(const QuotaSlot&) = delete;
  QuotaSlot& operator=(const QuotaSlot&) = delete;
  ~QuotaSlot() { Close(); }
  // The stream opens (`method`: Acquire, Observe, KeepAlive): OK, or
  // RESOURCE_EXHAUSTED naming the quota (nothing counted then).
  absl::Status OpenStream(LockServiceImpl* svc, grpc::ServerContext* ctx,
                          const absl::StatusOr<std::string>& identity, const char* method);
  // An Acquire stream's contender opens on `lock`.
  absl::Status OpenContender(absl::string_view lock);
  void Close();

 private:
  // Made only for a stream its identity's quota counts: without quotas a
  // stream carries one pointer for this (W5 keeps 20,000 streams).
  struct Counted {
    LockServiceImpl* svc;
    std::string who;
    bool contender = false;
  };
  std::unique_ptr<Counted> counted_;
};

class LockServiceImpl final {
 public:
  // `max_streams` bounds open Acquire + KeepAlive streams on this replica.
  LockServiceImpl(LockEngine* engine, size_t max_streams)
      : engine_(engine), max_streams_(max_streams) {}

  // Before the server is built.
  void Register(grpc::ServerBuilder* builder) { builder->RegisterService(&async_); }
  // After it is built: waits for calls of every method on `cq` (polled by
  // the caller's CqThread).
  void Start(grpc::ServerCompletionQueue* cq);
  // The queue every call of this service runs on (set by Start).
  grpc::ServerCompletionQueue* cq() const { return cq_; }

  using ReleaseCall = rpc::UnaryCall<v1::ReleaseRequest, v1::ReleaseResponse>;
  using RevokeCall = rpc::UnaryCall<v1::RevokeRequest, v1::RevokeResponse>;
  using DescribeCall = rpc::UnaryCall<v1::DescribeRequest, v1::DescribeResponse>;
  using ListCall = rpc::UnaryCall<v1::ListRequest, v1::ListResponse>;
  using ProclaimCall = rpc::UnaryCall<v1::ProclaimRequest, v1::ProclaimResponse>;
  using CheckTokenCall = rpc::UnaryCall<v1::CheckTokenRequest, v1::CheckTokenResponse>;
  void CheckToken(CheckTokenCall* call);
  void Proclaim(ProclaimCall* call);
  void AwaitObserve();
  void Release(ReleaseCall* call);
  void Revoke(RevokeCall* call);
  void Describe(DescribeCall* call);
  void List(ListCall* call);
  // Arms the next Acquire / KeepAlive stream.
  void AwaitAcquire();
  void AwaitKeepAlive();

  size_t open_streams() const { return open_streams_.load(); }

  // Reserves a stream slot; false when the replica is at max_streams.
  bool TryOpenStream();
  // RESOURCE_EXHAUSTED naming the flag and the limit.
  grpc::Status StreamLimitStatus() const;
  void CloseStream() { open_streams_.fetch_sub(1); }
  LockEngine* engine() const { return engine_; }
  // The Observe RPC's hub; set before serving (null: Observe is UNAVAILABLE).
  void SetObservers(LockObservers* observers) { observers_ = observers; }
  LockObservers* observers() const { return observers_; }
  // Set before serving; `observer` must outlive the service.
  void SetObserver(ServiceObserver* observer) { observer_ = observer; }
  void NoteRequest(const char* method, grpc::StatusCode code) const {
    if (observer_) observer_->OnRequestDone(method, static_cast<int>(code));
  }
  void NoteStreams(const char* kind, int delta) const {
    if (observer_) observer_->OnStreamsChanged(kind, delta);
  }
  void NoteStillHeldDropped() {
    still_held_dropped_.fetch_add(1);
    if (observer_) observer_->OnStillHeldDropped();
  }
  uint64_t still_held_dropped() const { return still_held_dropped_.load(); }

  // Mutual TLS and authorization; set before serving (both may be null:
  // no client certificates asked for, no policy). Must outlive the service.
  void SetAuth(ClientCertVerifier* verifier, PolicyFile* policy) {
    verifier_ = verifier;
    policy_ = policy;
  }
  // The caller's verified identity ("" without mutual TLS), or
  // UNAUTHENTICATED (audited).
  absl::StatusOr<std::string> Authenticate(grpc::ServerContext* ctx,
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
  template <typename Call>
  bool Refused(Call* call, const char* method, const absl::Status& s) const {
    if (s.ok()) return false;
    grpc::Status g(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
    NoteRequest(method, g.error_code());
    call->Finish(g);
    return true;
  }
  // The policy whose rules are in force: none without mutual TLS (a
  // policy file then holds only quotas).
  std::shared_ptr<const AuthzPolicy> policy() const {
    return policy_ && verifier_ ? policy_->current() : nullptr;
  }

  // Per-identity quotas (server/rpc/quota.h), counted only with a policy
  // file. A stream's quota identity: the verified identity, else the
  // caller's address (also for a caller whose certificate was refused).
  std::string QuotaIdentityOf(grpc::ServerContext* ctx,
                              const absl::StatusOr<std::string>& identity) const;
  // A stream of `who` opens (`method`: Acquire, Observe, KeepAlive): OK and
  // *counted = true, or RESOURCE_EXHAUSTED naming the quota (audited and
  // counted in metrics). OK and *counted = false without a policy file.
  absl::Status OpenQuotaStream(const std::string& who, const char* method, bool* counted);
  void CloseQuotaStream(const std::string& who);
  // An Acquire stream of `who` opens a contender on `lock`.
  absl::Status OpenQuotaContender(const std::string& who, absl::string_view lock, bool* counted);
  void CloseQuotaContender(const std::string& who);
  const QuotaTracker& quota_usage() const { return quota_usage_; }
  // The refusal's metric, and its audit line when the tracker says so.
  void NoteQuotaRefusal(const QuotaTracker::Refusal& r, const std::string& who,
                        const char* method, absl::string_view lock) const;
  // A stream refused by a quota is answered `delay` after its open
  // (turnstiled --quota-refusal-delay; 0: at once). The refused stream
  // keeps its slot of the caller's connection meanwhile, so a client that
  // retries without backoff is held to (its connection's free streams) /
  // delay opens per second on its own side, and the queue thread stays
  // free for everyone else. Set before serving.
  void SetQuotaRefusalDelay(Millis delay) { refusal_delay_ = delay; }
  // At most this many refusals wait at once on a replica; the next ones
  // are answered at once (each waiting one is a live call: memory).
  static constexpr int kMaxPausedRefusals = 1024;
  // A quota refusal is about to be answered: true and its deadline when it
  // is to wait (EndRefusalPause once it is answered), false to answer now.
  bool TakeRefusalPause(gpr_timespec* deadline);
  void EndRefusalPause() {
    paused_refusals_.fetch_sub(1);
    if (observer_) observer_->OnRefusalsWaiting(-1);
  }
  int paused_refusals() const { return paused_refusals_.load(); }

 private:
  ClientCertVerifier* verifier_ = nullptr;
  PolicyFile* policy_ = nullptr;
  LockEngine* const engine_;
  LockObservers* observers_ = nullptr;
  const size_t max_streams_;
  std::atomic<size_t> open_streams_{0};
  std::atomic<uint64_t> still_held_dropped_{0};
  QuotaTracker quota_usage_;
  Millis refusal_delay_{0};
  std::atomic<int> paused_refusals_{0};
  ServiceObserver* observer_ = nullptr;
  v1::LockService::AsyncService async_;
  grpc::ServerCompletionQueue* cq_ = nullptr;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RPC_LOCK_SERVICE_H_
