// Metrics: the Prometheus pull endpoint of one replica (SPEC §6).
//
// Every metric family and every series known in advance is built once, at
// start; events record into prebuilt references (no registry look-up per
// event). Per-lock gauges (turnstile_lock_waiters / turnstile_lock_holders)
// are computed at scrape time from the engine's live state, so they are exact
// however a stream ended. Locks get their own `lock` label first come first
// served up to `max_locks`; the rest are summed under lock="_overflow". A lock
// keeps its label while it has contenders on this replica. Thread-safe.
#ifndef TURNSTILE_SERVER_METRICS_H_
#define TURNSTILE_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/engine/lock_engine.h"
#include "server/rpc/service_observer.h"
#include "server/zk/zk_session.h"


namespace turnstile {

struct MetricsOptions {
  std::string listen = "127.0.0.1:9464";  // host:port; port 0 picks one
  int64_t max_locks = 100;
  // Lock-name prefixes whose names may be a `lock` label; the other locks
  // are summed under kHiddenLockLabel. nullopt: every name.
  std::optional<std::vector<std::string>> lock_label_prefixes;
  std::string version;
};

// The label value summing locks past the cap.
inline constexpr char kOverflowLockLabel[] = "_overflow";
// The label value summing locks whose names /metrics may not show
// (--metrics-lock-prefixes).
inline constexpr char kHiddenLockLabel[] = "_hidden";

class Metrics final : public EngineObserver, public ZkObserver, public ServiceObserver {
 public:
  // Builds the families and starts the exposer. `engine` and `zk` must
  // outlive the returned object; the caller installs it as their observer.
  static absl::StatusOr<std::unique_ptr<Metrics>> Start(const MetricsOptions& options,
                                                        LockEngine* engine, std::vector<ZkSession*> sessions);
  ~Metrics() override;

  // The bound port of the exposer.
  int port() const { return port_; }

  // EngineObserver.
  void OnWaitEnded(AcquireResult result, double wait_seconds) override;
  void OnHoldEnded(double hold_seconds) override;
  void OnHandoff(double seconds) override;
  void OnLost(LostReason reason) override;
  void OnRevokeRequested() override;
  void OnRevokeDelivered() override;
  // ZkObserver.
  void OnRequestDone(ZkOp op, ZkCode code, double seconds) override;
  void OnWatchEvent() override;
  void OnSessionExpired() override;
  // ServiceObserver.
  void OnRequestDone(const char* method, int code) override;
  void OnStreamsChanged(const char* kind, int delta) override;
  void OnStillHeldDropped() override;
  void OnQuotaRefused(const std::string& quota, const char* limit) override;
  void OnRefusalsWaiting(int delta) override;
  // The serving TLS certificate's notAfter (Unix seconds), set at start and
  // after every reload; the series exists only on a replica serving TLS.
  void SetTlsCertificateExpiry(int64_t unix_seconds);

 private:
  class LiveCollector;
  static constexpr int kZkOps = static_cast<int>(ZkOp::kCount);
  static constexpr int kZkCodes = static_cast<int>(ZkCode::kOther) + 1;
  static constexpr int kMethods = 9;
  static constexpr int kGrpcCodes = 17;

  Metrics() = default;

  int port_ = 0;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<LiveCollector> live_;

  std::array<prometheus::Histogram*, static_cast<int>(AcquireResult::kCount)> wait_{};
  std::array<prometheus::Counter*, static_cast<int>(AcquireResult::kCount)> acquires_{};
  prometheus::Histogram* hold_ = nullptr;
  prometheus::Histogram* handoff_ = nullptr;
  std::array<prometheus::Counter*, 4> lost_{};
  std::array<prometheus::Histogram*, kZkOps> zk_duration_{};
  prometheus::Family<prometheus::Counter>* zk_errors_family_ = nullptr;
  std::array<std::array<std::atomic<prometheus::Counter*>, kZkCodes>, kZkOps> zk_errors_{};
  prometheus::Counter* expirations_ = nullptr;
  prometheus::Counter* revokes_requested_ = nullptr;
  prometheus::Counter* revokes_delivered_ = nullptr;
  prometheus::Counter* watch_events_ = nullptr;
  prometheus::Gauge* streams_acquire_ = nullptr;
  prometheus::Gauge* streams_keepalive_ = nullptr;
  prometheus::Gauge* streams_observe_ = nullptr;
  prometheus::Counter* still_held_dropped_ = nullptr;
  // By quota name (from the policy file: as many series as it has quotas,
  // times three limits; never by identity) and limit.
  prometheus::Family<prometheus::Counter>* quota_refusals_family_ = nullptr;
  prometheus::Gauge* quota_refusals_waiting_ = nullptr;
  prometheus::Family<prometheus::Gauge>* tls_expiry_family_ = nullptr;
  std::atomic<prometheus::Gauge*> tls_expiry_{nullptr};
  prometheus::Family<prometheus::Counter>* grpc_family_ = nullptr;
  std::array<std::array<prometheus::Counter*, kGrpcCodes>, kMethods> grpc_{};  // all made up front
  absl::Mutex lazy_mu_;  // creating a lazily-added series (ZooKeeper error codes); a leaf

  // Last: stopped first, before the series it serves go away.
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_METRICS_H_
