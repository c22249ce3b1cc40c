// Test support: in-process replicas on a real ZooKeeper, synchronous gRPC
// Acquire streams whose events are read by a background thread and awaited
// with deadlines, and a synchronous ZooKeeper view for checking nodes.
// Thread-safe where noted.
#ifndef TURNSTILE_TESTS_TEST_SUPPORT_H_
#define TURNSTILE_TESTS_TEST_SUPPORT_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "server/replica.h"
#include "server/zk/zk_session.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile::testing {

using std::chrono::milliseconds;
using v1::AcquireEvent;

// A znode root unique to this test process and test.
std::string UniqueRoot(const std::string& tag);

// Replica config for tests: loopback, free port, given ZooKeeper and root.
ReplicaConfig TestConfig(const std::string& zk, const std::string& root);

// Starts a replica and waits until it is serving (ZooKeeper session up).
std::unique_ptr<Replica> StartReplica(const ReplicaConfig& config,
                                      std::unique_ptr<ZkSession> zk = nullptr);

std::unique_ptr<v1::LockService::Stub> NewStub(const std::string& address);

// Mutual-TLS mode of the integration suite (issue 13): with
// TURNSTILE_TEST_MTLS=1 (the *_mtls ctest entries) every replica a test
// starts requires client certificates and enforces a permissive policy
// (anyone may do anything), and every client presents a certificate:
// TestConfig, NewStub, IsServing and the TURNSTILE_TLS_* / TURNSTILE_AUTHZ_FILE
// variables (set for this process, so spawned turnstiled, CLI, Python and
// C++ clients inherit them) all use one per-run PKI. The suite then proves
// that nothing depends on plaintext. Decided once, at start-up.
bool MtlsMode();
// The identity of the suite's certificate in mTLS mode.
inline constexpr char kMtlsSuiteIdentity[] = "spiffe://turnstile.test/suite";
// Channel credentials for the current mode (plaintext or mutual TLS).
std::shared_ptr<grpc::ChannelCredentials> TestChannelCredentials();

v1::AcquireOpen OpenMsg(const std::string& name, milliseconds wait_timeout,
                        const std::string& owner = "", milliseconds ttl = milliseconds(0));

// One Acquire stream. Events are collected by a reader thread; Await* wait for
// them with a deadline. Thread-safe.
class AcquireStream {
 public:
  AcquireStream(v1::LockService::Stub* stub, const v1::AcquireOpen& open);
  ~AcquireStream();  // cancels if still open

  // The next event not yet taken, or nullopt if none arrives within
  // `timeout` (or the stream ended).
  std::optional<AcquireEvent> Next(milliseconds timeout = milliseconds(20000));
  // Skips QUEUED events until an event of `type`; nullopt on timeout/end or
  // on a different non-QUEUED event (which is consumed and kept in other()).
  std::optional<AcquireEvent> Await(AcquireEvent::Type type,
                                    milliseconds timeout = milliseconds(20000));
  // Like Await, but also skips SUSPENDED and RESUMED (a session expiry is
  // seen only after a disconnection).
  std::optional<AcquireEvent> AwaitAfterSuspension(AcquireEvent::Type type,
                                                   milliseconds timeout = milliseconds(20000));
  // Waits for the stream to end and returns its status.
  std::optional<grpc::Status> AwaitEnd(milliseconds timeout = milliseconds(20000));
  bool ended() const;

  void SendRelease();
  void CloseWrites();  // half-close: releases
  void Cancel();       // the client goes away
  std::vector<AcquireEvent> queued_seen() const;
  // STILL_HELD events (never returned by Next/Await) with when they came.
  struct Refresh {
    std::chrono::steady_clock::time_point at;
    AcquireEvent event;
  };
  std::vector<Refresh> still_held_seen() const;

 private:
  void ReadLoop();

  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AcquireRequest, AcquireEvent>> rw_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<AcquireEvent> events_;   // GUARDED_BY(mu_)
  std::vector<AcquireEvent> queued_;  // GUARDED_BY(mu_) every QUEUED seen
  std::vector<Refresh> still_held_;   // GUARDED_BY(mu_)
  std::optional<grpc::Status> status_;  // GUARDED_BY(mu_)
  std::mutex write_mu_;
  bool writes_done_ = false;  // GUARDED_BY(write_mu_)
  std::thread reader_;
};

// Blocking ZooKeeper calls over a ZkSession, for assertions.
class SyncZk {
 public:
  explicit SyncZk(const std::string& connect_string);
  ~SyncZk();
  absl::StatusOr<std::vector<std::string>> Children(const std::string& path);
  // Contender children only (names the engine would order).
  std::vector<std::string> Contenders(const std::string& lock_path);
  absl::StatusOr<ZkStat> Exists(const std::string& path);
  ZkCode Delete(const std::string& path);
  ZkCode Create(const std::string& path, const std::string& data, CreateMode mode);
  ZkSession& session() { return *zk_; }

 private:
  std::unique_ptr<ZkSession> zk_;
};

// Expires the replica's ZooKeeper session `session` of its pool (twin
// handle, then close) and waits until it runs on a new session. Retries: the
// original handle may reconnect and win the session back before the twin's
// close applies.
bool ExpireReplicaSession(const std::string& connect, Replica& replica, size_t session = 0);

// A session id as ZooKeeper's four-letter words print it ("0x1000a2c9e0000").
std::string SessionHex(int64_t id);

// Health of a replica as its gRPC health service reports it (service "":
// readiness, SERVING only while its ZooKeeper sessions are up). Without
// `creds`, TestChannelCredentials().
bool IsServing(const std::string& address,
               std::shared_ptr<grpc::ChannelCredentials> creds = nullptr);

}  // namespace turnstile::testing

#endif  // TURNSTILE_TESTS_TEST_SUPPORT_H_

namespace turnstile::testing {

// A child process with its stdout on a pipe; killed (SIGKILL) and reaped on
// destruction if still running.
class ChildProcess {
 public:
  static std::unique_ptr<ChildProcess> Spawn(const std::vector<std::string>& argv);
  ~ChildProcess();
  // The next stdout line, or nullopt if none within `timeout` (or EOF).
  std::optional<std::string> ReadLine(milliseconds timeout);
  // Whatever output arrives within `timeout`, partial lines included.
  std::string ReadSome(milliseconds timeout);
  // Reads lines until one starts with `prefix`.
  std::optional<std::string> AwaitLine(const std::string& prefix, milliseconds timeout);
  void Signal(int sig);
  // Waits for exit; returns the exit status (WEXITSTATUS) or -signal.
  std::optional<int> Wait(milliseconds timeout);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
  bool reaped_ = false;
};

// A plain HTTP/1.0 GET of http://127.0.0.1:<port><target> (the server closes
// the connection after the reply); 10 s receive timeout. For Prometheus
// endpoints: /metrics of a replica, the HTTP API of a Prometheus server.
struct HttpResponse {
  int status = 0;
  std::string body;
};
absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& target);
// Percent-encodes everything but unreserved characters (RFC 3986), for
// query-string values.
std::string UrlEncode(std::string_view s);

// The whole file, or "" if it cannot be read.
std::string ReadFile(const std::string& path);

// Writes `text` to path + ".new" and renames it over `path`, as a
// Kubernetes ConfigMap update swaps a file; false if either step failed.
bool ReplaceFile(const std::string& path, const std::string& text);

// VmRSS of this process in kB (-1 if unreadable).
long ResidentKb();

// Path of a binary built next to the tests (e.g. "acquire_child"), or of
// turnstiled.
std::string TestBinary(const std::string& name);

// A turnstiled in its own process (to pause, kill or signal it), listening
// on a free loopback port, serving (waited for, 20 s at most).
struct ReplicaProcess {
  std::unique_ptr<ChildProcess> process;
  std::string address;
};
// `args`: flags after "--listen 127.0.0.1:0 --log-level error", e.g.
// {"--zk", connect, "--zk-root", root, "--zk-session-timeout", "2s"}.
std::optional<ReplicaProcess> SpawnReplicaProcess(const std::vector<std::string>& args);

// Readiness of a turnstiled process a test started itself. A replica prints
// "turnstiled <version> listening on <address> ..." as soon as its port is
// bound, but it answers UNAVAILABLE until its ZooKeeper sessions connect:
// listening is not serving. Every test that starts a turnstiled process
// calls AwaitReplicaServing (SpawnReplicaProcess does) before its first call.
//
// The address from the "listening on" line (other lines before it are
// skipped), or an error if none comes within `timeout`.
absl::StatusOr<std::string> AwaitListeningAddress(ChildProcess& process,
                                                  milliseconds timeout = milliseconds(30000));
// AwaitListeningAddress, then polls the gRPC health check (with `creds`;
// without, TestChannelCredentials()) until it says SERVING. An error if the
// process exits or `timeout` (for both) passes first.
absl::StatusOr<std::string> AwaitReplicaServing(
    ChildProcess& process, std::shared_ptr<grpc::ChannelCredentials> creds = nullptr,
    milliseconds timeout = milliseconds(30000));

}  // namespace turnstile::testing
