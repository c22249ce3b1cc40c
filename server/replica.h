// Replica: one turnstiled — a ZooKeeper session, the lock engine, and the
// gRPC server (LockService, grpc.health.v1, reflection) — assembled from a
// ReplicaConfig. Used by main() and by tests that run replicas in-process.
// Thread-safe; Drain() and the destructor must not run concurrently.
#ifndef TURNSTILE_SERVER_REPLICA_H_
#define TURNSTILE_SERVER_REPLICA_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/common/flags.h"
#include "server/engine/lock_engine.h"
#include "server/engine/lock_observers.h"
#include "server/zk/event_loop.h"
#include "server/zk/zk_session.h"

namespace grpc {
class Server;
}

namespace turnstile {

class ClientCertVerifier;
class HealthService;
class LockServiceImpl;
class ServingCertificate;
namespace rpc {
class CqThread;
}
class Metrics;
class PolicyFile;
class QuotaSet;

struct ReplicaConfig {
  std::string listen = "127.0.0.1:7400";
  std::string zk = "127.0.0.1:2181";
  std::string zk_root = "/turnstile";
  Millis zk_session_timeout{10000};
  // A file holding "scheme:credentials" (e.g. digest:user:secret) for
  // ZooKeeper auth; nodes are then created with the creator-only ACL.
  std::string zk_auth_file;
  std::string replica_id;  // default: <hostname>-<pid>
  Millis drain_timeout{10000};
  int64_t max_streams = 10000;
  static constexpr int64_t kAutoStreamsPerConnection = -1;
  // Streams one client connection may have open at once (HTTP/2's
  // SETTINGS_MAX_CONCURRENT_STREAMS); 0: gRPC's default (no cap);
  // kAutoStreamsPerConnection: PerConnectionStreamCap decides.
  int64_t max_streams_per_connection = -1;
  // A stream refused by a quota is answered this long after its open
  // (LockServiceImpl::SetQuotaRefusalDelay); 0: at once.
  Millis quota_refusal_delay{50};
  int64_t max_contenders_per_lock = 1000;
  // The largest N of a semaphore (AcquireOpen.max_holders); its first
  // waiter watches N nodes.
  int64_t max_semaphore_holders = 1000;
  int64_t max_watch_bytes = 512 * 1024;  // per ZooKeeper session
  // 0 (the default): AutoZkSessions(), one per core, at least 2 and at
  // most 4 (issue 39, measured). Each session is one loop thread with its
  // own ZooKeeper pipeline (a session's requests are ordered, so one
  // session serializes every lock's) and its own --max-watch-bytes budget.
  // With writes batched per loop turn, W3 (32 clients, 32 locks) on 2
  // cores ran 0.80-0.87 of the floor with two sessions against 0.70-0.80
  // with four (more loops than cores: more wake-ups, smaller batches), and
  // 0.67-0.73 with one. W1 (one lock) is unchanged by it.
  int64_t zk_sessions = 0;
  Millis max_wait_timeout{3600 * 1000};
  Millis max_ttl{3600 * 1000};
  // PEM files; both set = TLS on the gRPC port, neither = plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  // PEM CA bundle: mutual TLS. Every call must present a client certificate
  // issued by it (else UNAUTHENTICATED); the caller's identity comes from
  // it (server/rpc/client_cert.h). Needs tls_cert_file.
  std::string tls_client_ca_file;
  // PEM CRLs of the CAs that issue client certificates: a certificate they
  // list gets UNAUTHENTICATED ("certificate revoked"). Reloaded when the
  // file changes and on SIGHUP. Needs tls_client_ca_file.
  std::string tls_client_crl_file;
  // Authorization policy (protos/turnstile/v1/authz.proto, JSON); reloaded
  // when the file changes and on SIGHUP. Needs tls_client_ca_file.
  std::string authz_file;
  std::string log_level = "warn";
  // Tests: the engine checks its kept counts against a full count after
  // every operation (EngineOptions::check_invariants); slow with many
  // contenders. The test fixtures turn it on.
  bool check_invariants = false;
  // EngineOptions::batch_writes (--batch-zk-writes).
  bool batch_zk_writes = true;
  // Prometheus /metrics address (host:port; port 0 picks one); empty = off.
  // Off for in-process replicas; Register() makes the flag default
  // kDefaultMetricsListen, so turnstiled serves metrics unless told not to.
  std::string metrics_listen;
  static constexpr char kDefaultMetricsListen[] = "127.0.0.1:9464";
  // Locks with their own `lock` label; the rest are summed as "_overflow".
  int64_t metrics_max_locks = 100;
  // Which lock names /metrics may show as a `lock` label (it has no client
  // authentication): "auto" = every name without authz_file (anyone may List
  // them then), none with a policy in force; "*" = every name; otherwise
  // comma-separated lock-name prefixes ("" = none). The other locks are
  // summed under lock="_hidden".
  std::string metrics_lock_prefixes = "auto";

  // Registers every field as a flag (and TURNSTILE_* variable).
  void Register(FlagSet* flags);
};

// grpc.health.v1 service name that stays SERVING while the process serves
// RPCs (for liveness probes); "" is readiness: ZooKeeper up, not draining.
inline constexpr char kLivenessService[] = "liveness";
// Largest --zk-sessions.
inline constexpr int64_t kMaxZkSessions = 64;
// Under the automatic per-connection stream cap, the streams a connection
// may open beyond the most its identity may hold: room for unary calls in
// flight (28 over a max_streams of 100 is the cap of 128 that kept a
// flood's cost to others at 1x, deploy/README.md).
inline constexpr int64_t kConnectionStreamHeadroom = 28;
// The per-connection stream cap in force: --max-streams-per-connection
// unless it is auto (-1, the default); auto derives it from the policy's
// quotas (`quotas`, null without a policy): the largest max_streams any
// identity may hold, or --max-streams when some identity is unbounded, plus
// kConnectionStreamHeadroom. A connection within its quota never waits for
// a slot; a flood's connection holds at most that many opens in hand.
int64_t PerConnectionStreamCap(const ReplicaConfig& c, const QuotaSet* quotas);

// The pool size --zk-sessions 0 means: one session per core the machine
// reports, at least 2 and at most 4.
int64_t AutoZkSessions();

class Replica {
 public:
  // Starts serving at once; health is NOT_SERVING until every ZooKeeper
  // session of the pool is up. `zk` replaces the real session 0 of the pool
  // (tests inject faults); the others are real.
  static absl::StatusOr<std::unique_ptr<Replica>> Start(
      const ReplicaConfig& config, std::unique_ptr<ZkSession> zk = nullptr);
  ~Replica();  // stops at once (no drain)

  int port() const { return port_; }
  // The bound port of the /metrics endpoint; 0 when metrics are off.
  int metrics_port() const;
  std::string address() const;
  LockEngine& engine() { return *engine_; }
  LockObservers& observers() { return *observers_; }
  LockServiceImpl& service() { return *service_; }
  ZkSession& zk() { return *zk_[0]; }
  // Session `i` of the pool (config().zk_sessions of them, or
  // AutoZkSessions() for 0).
  ZkSession& zk(size_t i) { return *zk_[i]; }
  size_t zk_sessions() const { return zk_.size(); }
  // Timers pending on the engine's loops (tests: nothing leaks).
  size_t pending_timers() const { return engine_->pending_timers(); }
  const ReplicaConfig& config() const { return config_; }

  // SIGTERM: health NOT_SERVING, new Acquires refused, waiters told
  // UNAVAILABLE; holders get up to drain_timeout to release, then LOST
  // (shutdown); the ZooKeeper session is closed so every node of this replica
  // vanishes at once; then the gRPC server stops.
  void Drain();

  // Re-reads --authz-file now (SIGHUP); true if a new policy is in force.
  // No-op without a policy file.
  bool ReloadPolicy();
  // Re-reads --tls-client-crl-file now (SIGHUP); true if a new CRL is in
  // force. No-op without a CRL file.
  bool ReloadCrl();
  // Re-reads the TLS certificate and key and the client CA bundle now
  // (SIGHUP; they are also checked four times a second); true if any new
  // material is in force.
  bool ReloadTls();
  // The serving certificate's notAfter (Unix seconds); 0 without TLS.
  int64_t tls_not_after() const;
  // The per-connection stream cap the server was built with (0: none).
  int64_t per_connection_stream_cap() const { return stream_cap_; }

 private:
  Replica() = default;
  void Stop();
  // Every 5 s on the housekeeping thread: hands the heap that a burst of streams
  // left behind back to the system once many of them have ended.
  void ScheduleHeapTrim();
  // Four times a second on the housekeeping thread: reloads a changed policy or
  // CRL file.
  void ScheduleFileChecks();
  // After a policy reload: warns when a quota now lets one identity hold
  // more streams than the per-connection cap fixed at start admits.
  void CheckStreamCap() const;

  ReplicaConfig config_;
  int port_ = 0;
  // File reloads and heap trims: a loop of their own ("ts-housekeep"), so
  // that a 12-45 ms malloc_trim or a slow file read never delays a wait
  // timeout, a lease or a heartbeat on the sessions' loops.
  std::unique_ptr<EventLoop> housekeeping_;
  std::vector<std::unique_ptr<ZkSession>> zk_;
  std::unique_ptr<LockEngine> engine_;
  // The Observe RPC's hub (its watchers end with the sessions' Close).
  std::unique_ptr<LockObservers> observers_;
  std::unique_ptr<ClientCertVerifier> verifier_;
  std::unique_ptr<ServingCertificate> serving_cert_;
  std::unique_ptr<PolicyFile> policy_;
  std::unique_ptr<LockServiceImpl> service_;
  std::unique_ptr<HealthService> health_;
  // The one completion queue and its thread: every RPC's I/O and handlers
  // (server/rpc/async_rpc.h). Declared before server_: destroyed after it.
  std::unique_ptr<rpc::CqThread> cq_thread_;
  std::unique_ptr<grpc::Server> server_;
  bool stopped_ = false;
  int64_t stream_cap_ = 0;
  size_t trim_peak_streams_ = 0;  // timer thread only
  // Last: destroyed first, so no scrape reads a dying engine.
  std::unique_ptr<Metrics> metrics_;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_REPLICA_H_
