// ServiceObserver: what the gRPC service reports to its metrics. Kept apart
// from lock_service.h so that metrics.h does not see gRPC's headers.
#ifndef TURNSTILE_SERVER_RPC_SERVICE_OBSERVER_H_
#define TURNSTILE_SERVER_RPC_SERVICE_OBSERVER_H_

#include <string>

namespace turnstile {

// Receives the service's measurements. Thread-safe, quick.
class ServiceObserver {
 public:
  virtual ~ServiceObserver() = default;
  // `method` is the RPC name (Acquire, Release, KeepAlive, Describe, List,
  // Revoke, Observe, Proclaim, CheckToken); `code` the gRPC status code's number (0 = OK .. 16).
  virtual void OnRequestDone(const char* method, int code) = 0;
  // `delta` is +1 or -1; `kind` is "acquire", "keepalive" or "observe".
  virtual void OnStreamsChanged(const char* kind, int delta) = 0;
  // A pending STILL_HELD was replaced by a newer one (a client not reading).
  virtual void OnStillHeldDropped() {}
  // A quota of the policy file refused an open; `limit` is "streams",
  // "contenders" or "opens".
  virtual void OnQuotaRefused(const std::string& quota, const char* limit) {}
  // A quota refusal starts (+1) or ends (-1) waiting out the replica's
  // --quota-refusal-delay.
  virtual void OnRefusalsWaiting(int delta) {}
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RPC_SERVICE_OBSERVER_H_
