#include "server/replica.h"

#include "server/rpc/serving_cert.h"

#include "server/rpc/authz.h"
#include "server/rpc/client_cert.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#ifdef __GLIBC__
#include <malloc.h>  // malloc_trim
#endif

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/ascii.h"
#include "client/common/duration_text.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/rpc/async_rpc.h"
#include "server/rpc/health_service.h"
#include "server/rpc/lock_service.h"
#include "server/metrics.h"

namespace turnstile {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Why gRPC could not bind `listen` (it only logs the reason): one bind of
// our own, without SO_REUSEPORT, names the usual cause.
std::string ListenFailureReason(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return "";
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
    return absl::StrCat(": cannot resolve \"", host, "\"");
  }
  std::string why;
  const int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd >= 0) {
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0) {
      const int err = errno;
      why = err == EADDRINUSE
                ? ": address already in use (is another turnstiled or other server listening "
                  "there?)"
                : absl::StrCat(": ", std::strerror(err));
    }
    close(fd);
  }
  freeaddrinfo(res);
  return why;
}

std::string DefaultReplicaId() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "-", getpid());
}

}  // namespace

void ReplicaConfig::Register(FlagSet* f) {
  f->String("listen", &listen, "gRPC listen address (host:port; port 0 picks a free one)");
  f->String("zk", &zk, "ZooKeeper connect string (host:port,host:port[/chroot])");
  f->String("zk-root", &zk_root, "root znode for all locks (created if missing)");
  f->Duration("zk-session-timeout", &zk_session_timeout,
              "requested ZooKeeper session timeout (the server may negotiate it)");
  f->String("zk-auth-file", &zk_auth_file,
            "file with \"scheme:credentials\" for ZooKeeper auth; nodes then get the creator-only ACL");
  f->String("replica-id", &replica_id, "name of this replica shown by Describe (default hostname-pid)");
  f->Duration("drain-timeout", &drain_timeout,
              "on SIGTERM, how long holders may keep their locks before LOST(shutdown)");
  f->Int("max-streams", &max_streams, "open Acquire + KeepAlive streams allowed on this replica");
  f->Int("max-streams-per-connection", &max_streams_per_connection,
         "streams one client connection may have open at once (0 = no cap; -1 = auto: the "
         "largest max_streams any identity may hold under --authz-file's quotas, or "
         "--max-streams when some identity is unbounded, plus 28 for unary calls); bounds "
         "how many stream starts one connection can queue ahead of other clients' messages, "
         "so a flooding client delays others less; a client with more holds than this over "
         "one channel waits on its side");
  f->Duration("quota-refusal-delay", &quota_refusal_delay,
              "a stream refused by a quota is answered this long after its open (0 = at "
              "once); it keeps its connection's stream slot meanwhile, so with "
              "--max-streams-per-connection a client retrying without backoff opens at most "
              "(its free streams) per delay; at most 1024 refusals wait at once");
  f->Int("max-contenders-per-lock", &max_contenders_per_lock,
         "holders + waiters allowed on one lock (cluster-wide)");
  f->Int("max-semaphore-holders", &max_semaphore_holders,
         "largest max_holders (N) of a semaphore an Acquire may ask for (its first waiter "
         "watches N nodes)");
  f->Int("max-watch-bytes", &max_watch_bytes,
         "bytes of znode paths the contenders of one ZooKeeper session may watch (ZooKeeper "
         "re-sends all of a session's watches in one packet on reconnect; keep well under "
         "jute.maxbuffer)");
  f->Int("zk-sessions", &zk_sessions,
         "ZooKeeper sessions this replica spreads its locks over (1..64; 0, the default: one "
         "per core, at least 2 and at most 4; each lock uses one, chosen by a hash of its "
         "name), each with its own loop thread; more sessions spread the locks' ZooKeeper "
         "traffic and each adds a --max-watch-bytes budget");
  f->Duration("max-wait-timeout", &max_wait_timeout, "largest wait_timeout an Acquire may ask for");
  f->Duration("max-ttl", &max_ttl, "largest lease ttl an Acquire may ask for");
  f->String("tls-cert-file", &tls_cert_file, "PEM certificate chain for TLS on the gRPC port");
  f->String("tls-key-file", &tls_key_file, "PEM private key for TLS on the gRPC port");
  f->String("tls-client-ca-file", &tls_client_ca_file,
            "PEM CA bundle: require mutual TLS; callers are identified by their client "
            "certificate (first URI SAN, else DNS SAN, else subject CN); needs --tls-cert-file");
  f->String("tls-client-crl-file", &tls_client_crl_file,
            "PEM CRLs of the CAs that issue client certificates (one per such CA): a listed "
            "certificate is refused (UNAUTHENTICATED); reloaded when the file changes and on "
            "SIGHUP; needs --tls-client-ca-file");
  f->String("authz-file", &authz_file,
            "authorization policy (JSON, see protos/turnstile/v1/authz.proto): which identities "
            "may do what on which lock-name prefixes, deny by default (rules need "
            "--tls-client-ca-file), and per-identity quotas (streams, contenders, opens per "
            "second); reloaded when the file changes and on SIGHUP");
  f->String("log-level", &log_level, "error, warn, info or debug");
  f->Bool("check-invariants", &check_invariants,
          "for tests: after every operation the engine recounts its contenders and aborts "
          "if a count it keeps (the per-lock loads of /metrics) is wrong; slow with many "
          "contenders");
  f->Bool("batch-zk-writes", &batch_zk_writes,
          "send the contender creates a ZooKeeper session has ready at once as one multi "
          "(one transaction; each node's fencing token from the multi's zxid); off: one "
          "request per create");
  if (metrics_listen.empty()) metrics_listen = kDefaultMetricsListen;
  f->String("metrics-listen", &metrics_listen,
            "Prometheus /metrics address (host:port; port 0 picks a free one; empty disables)");
  f->String("metrics-lock-prefixes", &metrics_lock_prefixes,
            "lock names /metrics may show as a lock label (it has no client authentication): "
            "auto = all without --authz-file rules, none with them; * = all; else comma-separated "
            "lock-name prefixes (empty = none); the rest are summed as lock=\"_hidden\"");
  f->Int("metrics-max-locks", &metrics_max_locks,
         "locks given their own lock label in metrics; the rest are summed as lock=\"_overflow\"");
}

int64_t AutoZkSessions() {
  const int64_t cores = static_cast<int64_t>(std::thread::hardware_concurrency());
  return std::min<int64_t>(4, std::max<int64_t>(2, cores));
}

absl::StatusOr<std::unique_ptr<Replica>> Replica::Start(
    const ReplicaConfig& config, std::unique_ptr<ZkSession> zk) {
  std::unique_ptr<Replica> r(new Replica());
  r->config_ = config;
  if (r->config_.replica_id.empty()) r->config_.replica_id = DefaultReplicaId();
  const ReplicaConfig& c = r->config_;
  if (c.zk_root.empty() || c.zk_root[0] != '/' || c.zk_root == "/" ||
      c.zk_root.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "--zk-root must be an absolute path other than \"/\", got \"", c.zk_root, "\""));
  }
  if (c.max_streams_per_connection < ReplicaConfig::kAutoStreamsPerConnection ||
      c.max_streams_per_connection > INT32_MAX) {
    return absl::InvalidArgumentError(
        "--max-streams-per-connection must be -1 (auto), 0 (no cap) or more");
  }
  if (c.quota_refusal_delay < Millis(0) || c.quota_refusal_delay > Millis(10000)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quota-refusal-delay is ", FormatDuration(c.quota_refusal_delay),
        "; it must be 0..10s"));
  }
  if (c.max_streams < 1 || c.max_contenders_per_lock < 1 || c.max_watch_bytes < 1) {
    return absl::InvalidArgumentError(
        "--max-streams, --max-contenders-per-lock and --max-watch-bytes must be >= 1");
  }
  if (c.max_semaphore_holders < 1 || c.max_semaphore_holders > kMaxSemaphoreHoldersEver) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-semaphore-holders is ", c.max_semaphore_holders, "; it must be 1..",
        kMaxSemaphoreHoldersEver));
  }
  if (c.zk_sessions < 0 || c.zk_sessions > kMaxZkSessions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--zk-sessions is ", c.zk_sessions, "; it must be 1..", kMaxZkSessions,
        ", or 0 for one per core (2..4)"));
  }
  const int64_t pool = c.zk_sessions == 0 ? AutoZkSessions() : c.zk_sessions;
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert-file and --tls-key-file go together");
  }
  if (!c.tls_client_ca_file.empty() && c.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca-file (mutual TLS) needs --tls-cert-file and --tls-key-file");
  }
  if (!c.tls_client_crl_file.empty() && c.tls_client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-crl-file needs --tls-client-ca-file: it revokes client certificates");
  }
  SetZkClientLogLevel(c.log_level);

  r->housekeeping_ = std::make_unique<EventLoop>();
  r->housekeeping_->Start(nullptr, "ts-housekeep");
  ZkClientOptions zo;
  zo.connect_string = c.zk;
  zo.session_timeout = c.zk_session_timeout;
  if (!c.zk_auth_file.empty()) {
    auto auth = ReadFile(c.zk_auth_file, "ZooKeeper auth");
    if (!auth.ok()) return auth.status();
    zo.auth = std::string(absl::StripAsciiWhitespace(*auth));
  }
  std::vector<ZkSession*> sessions;
  for (int64_t i = 0; i < pool; ++i) {
    zo.thread_name = absl::StrCat("ts-zk-", i);
    r->zk_.push_back(i == 0 && zk != nullptr ? std::move(zk) : NewZkClientSession(zo));
    sessions.push_back(r->zk_.back().get());
  }
  EngineOptions eo;
  eo.root = c.zk_root;
  eo.replica_id = c.replica_id;
  eo.limits.max_contenders_per_lock = static_cast<size_t>(c.max_contenders_per_lock);
  eo.check_invariants = c.check_invariants;
  eo.batch_writes = c.batch_zk_writes;
  eo.limits.max_semaphore_holders = static_cast<int32_t>(c.max_semaphore_holders);
  eo.limits.max_wait_timeout = c.max_wait_timeout;
  eo.limits.max_watched_path_bytes = static_cast<size_t>(c.max_watch_bytes);
  eo.limits.max_ttl = c.max_ttl;
  r->engine_ = std::make_unique<LockEngine>(sessions, eo);
  r->observers_ = std::make_unique<LockObservers>(r->engine_.get());
  r->service_ = std::make_unique<LockServiceImpl>(r->engine_.get(),
                                                  static_cast<size_t>(c.max_streams));
  r->service_->SetObservers(r->observers_.get());
  r->service_->SetQuotaRefusalDelay(c.quota_refusal_delay);
  if (!c.tls_client_ca_file.empty()) {
    auto ca = ReadFile(c.tls_client_ca_file, "TLS client CA");
    if (!ca.ok()) return ca.status();
    auto v = ClientCertVerifier::Create(*ca, c.tls_client_crl_file, c.tls_client_ca_file);
    if (!v.ok()) return v.status();
    r->verifier_ = std::move(*v);
  }
  if (!c.authz_file.empty()) {
    // Without mutual TLS the file may hold quotas (counted by address) but
    // no rules: a rule needs a verified identity.
    auto pf = PolicyFile::Load(c.authz_file, /*rules_allowed=*/!c.tls_client_ca_file.empty());
    if (!pf.ok()) return pf.status();
    r->policy_ = std::move(*pf);
  }
  r->service_->SetAuth(r->verifier_.get(), r->policy_.get());
  if (!c.metrics_listen.empty()) {
    MetricsOptions mo;
    mo.listen = c.metrics_listen;
    mo.max_locks = c.metrics_max_locks;
    if (c.metrics_lock_prefixes == "auto") {
      // With rules, lock names may be secret from some callers: none.
      if (r->policy_ != nullptr && r->verifier_ != nullptr) mo.lock_label_prefixes.emplace();
    } else if (c.metrics_lock_prefixes != "*") {
      mo.lock_label_prefixes.emplace();
      for (absl::string_view p : absl::StrSplit(c.metrics_lock_prefixes, ',', absl::SkipEmpty())) {
        mo.lock_label_prefixes->emplace_back(p);
      }
    }
    auto metrics = Metrics::Start(mo, r->engine_.get(), sessions);
    if (absl::IsInvalidArgument(metrics.status())) return metrics.status();
    if (!metrics.ok()) {
      // A taken metrics port must not stop the lock service itself.
      std::fprintf(stderr, "turnstiled: warning: metrics disabled: %s\n",
                   std::string(metrics.status().message()).c_str());
    } else {
      r->metrics_ = std::move(*metrics);
      r->engine_->SetObserver(r->metrics_.get());
      for (auto& zk : r->zk_) zk->SetObserver(r->metrics_.get());
      r->service_->SetObserver(r->metrics_.get());
    }
  }

  // Not gRPC's default health service: it is a callback service (see
  // server/rpc/health_service.h).
  grpc::EnableDefaultHealthCheckService(false);
  r->health_ = std::make_unique<HealthService>();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!c.tls_cert_file.empty()) {
    auto sc = ServingCertificate::Load(c.tls_cert_file, c.tls_key_file, r->verifier_ != nullptr);
    if (!sc.ok()) return sc.status();
    r->serving_cert_ = std::move(*sc);
    creds = r->serving_cert_->credentials();
    if (r->metrics_) r->metrics_->SetTlsCertificateExpiry(r->serving_cert_->not_after());
  }
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second replica given the same
  // --listen would bind too and silently take a share of the connections.
  // Without it, the second one fails to start with "address in use".
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  r->stream_cap_ =
      PerConnectionStreamCap(c, r->policy_ ? &r->policy_->current()->quotas() : nullptr);
  if (r->stream_cap_ > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                               static_cast<int>(r->stream_cap_));
  }
  builder.AddListeningPort(c.listen, creds, &r->port_);
  r->service_->Register(&builder);
  r->health_->Register(&builder);
  r->cq_thread_ = std::make_unique<rpc::CqThread>(builder.AddCompletionQueue());
  r->server_ = builder.BuildAndStart();
  if (r->server_ == nullptr || r->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", c.listen, ListenFailureReason(c.listen)));
  }
  // Health: service "" (readiness) is SERVING only while the ZooKeeper
  // session is up and the replica is not draining; service "liveness" is
  // SERVING as long as this process answers RPCs, so a liveness probe does
  // not restart replicas because ZooKeeper is away (a restart cannot help).
  // SetServingStatus(bool) sets every service, so "liveness" is re-set after.
  HealthService* health = r->health_.get();
  health->SetServingStatus(false);
  health->SetServingStatus(kLivenessService, true);
  r->engine_->SetServingListener([health](bool serving) {
    health->SetServingStatus(serving);
    health->SetServingStatus(kLivenessService, true);
  });
  r->service_->Start(r->cq_thread_->cq());
  r->health_->Start(r->cq_thread_->cq());
  r->cq_thread_->Start();
  for (auto& zk : r->zk_) {
    if (absl::Status s = zk->Start(); !s.ok()) return s;
  }
  r->ScheduleHeapTrim();
  if (r->policy_ != nullptr || r->verifier_ != nullptr || r->serving_cert_ != nullptr) {
    r->ScheduleFileChecks();
  }
  return r;
}

bool Replica::ReloadPolicy() {
  if (policy_ == nullptr || !policy_->Reload(true)) return false;
  CheckStreamCap();
  return true;
}

void Replica::CheckStreamCap() const {
  if (config_.max_streams_per_connection != ReplicaConfig::kAutoStreamsPerConnection) return;
  const int64_t wanted = PerConnectionStreamCap(config_, &policy_->current()->quotas());
  if (wanted <= stream_cap_) return;
  std::fprintf(stderr,
               "turnstiled: authz policy %s: its quotas let one identity hold more streams "
               "than the per-connection cap of %lld fixed at start admits (%lld wanted); a "
               "client with that many streams on one connection waits on its side until "
               "this replica restarts\n",
               policy_->path().c_str(), static_cast<long long>(stream_cap_),
               static_cast<long long>(wanted));
}

int64_t PerConnectionStreamCap(const ReplicaConfig& c, const QuotaSet* quotas) {
  if (c.max_streams_per_connection != ReplicaConfig::kAutoStreamsPerConnection) {
    return c.max_streams_per_connection;
  }
  const int64_t bound = quotas != nullptr ? quotas->StreamBound() : 0;
  const int64_t most = bound > 0 ? std::min(bound, c.max_streams) : c.max_streams;
  return std::min<int64_t>(most + kConnectionStreamHeadroom, INT32_MAX);
}

bool Replica::ReloadCrl() { return verifier_ != nullptr && verifier_->ReloadCrl(true); }

bool Replica::ReloadTls() {
  bool any = false;
  if (serving_cert_ != nullptr && serving_cert_->Reload(true)) {
    any = true;
    if (metrics_) metrics_->SetTlsCertificateExpiry(serving_cert_->not_after());
  }
  if (verifier_ != nullptr) any = verifier_->ReloadCa(true) || any;
  return any;
}

int64_t Replica::tls_not_after() const {
  return serving_cert_ != nullptr ? serving_cert_->not_after() : 0;
}

void Replica::ScheduleFileChecks() {
  housekeeping_->ScheduleAfter(std::chrono::milliseconds(250), [this] {
    if (policy_ != nullptr && policy_->Reload(false)) CheckStreamCap();
    if (verifier_ != nullptr) verifier_->ReloadCrl(false);
    if (verifier_ != nullptr) verifier_->ReloadCa(false);
    if (serving_cert_ != nullptr && serving_cert_->Reload(false) && metrics_) {
      metrics_->SetTlsCertificateExpiry(serving_cert_->not_after());
    }
    ScheduleFileChecks();
  });
}

// glibc keeps the heap of a burst of streams after they end: chunks still in
// use sit above the freed ones, so the heap's top cannot shrink (W5: RSS
// stays at ~440 MB once 20,000 streams have ended, with 2 MB of it in use).
// malloc_trim(0) also returns the free pages inside the heap. It holds each
// malloc arena's lock while it walks it (12-45 ms per trim at W5's size, on
// its own housekeeping thread: the engine's timers never wait for it, though
// a thread that allocates meanwhile may), so it runs only after a large drop: checked every 5 s,
// once a quarter of the peak since the last trim, and at least 512 streams
// (~10 MB), have ended.
void Replica::ScheduleHeapTrim() {
#ifdef __GLIBC__
  housekeeping_->ScheduleAfter(std::chrono::seconds(5), [this] {
    constexpr size_t kTrimAfterStreamsEnded = 512;
    const size_t open = service_->open_streams();
    trim_peak_streams_ = std::max(trim_peak_streams_, open);
    const size_t ended = trim_peak_streams_ - open;
    if (ended >= std::max(kTrimAfterStreamsEnded, trim_peak_streams_ / 4)) {
      malloc_trim(0);
      trim_peak_streams_ = open;
    }
    ScheduleHeapTrim();
  });
#endif
}

int Replica::metrics_port() const { return metrics_ ? metrics_->port() : 0; }

std::string Replica::address() const {
  std::string host = config_.listen.substr(0, config_.listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  return absl::StrCat(host, ":", port_);
}

void Replica::Drain() {
  engine_->BeginDrain();
  observers_->Drain();
  auto deadline = std::chrono::steady_clock::now() + config_.drain_timeout;
  // Holders release on their own schedule; check a few times a second.
  while (engine_->stats().holders > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  engine_->EndDrain();
  Stop();
}

void Replica::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // Close the session first so this replica's nodes vanish at once, then
  // let streams finish writing their last events.
  for (auto& zk : zk_) zk->Close();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  // The cancelled calls' last tags still run on the queue's thread; the
  // engine must not end other calls from them once the queue shuts down.
  engine_->Quiesce();
  // No engine timer may run once the engine is being destroyed, nor write
  // to a call once its queue is shut down: the sessions' loops, which run
  // them, stopped with their Close above.
  housekeeping_->Stop();
  cq_thread_->Stop();
}

Replica::~Replica() {
  if (server_) Stop();
}

}  // namespace turnstile
