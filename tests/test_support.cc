#include "tests/test_support.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <future>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/recipe/lock_name.h"
#include "server/recipe/lock_queue.h"
#include "tests/test_pki.h"
#include "tests/wait.h"
#include "client/lib/tls.h"

namespace turnstile::testing {

std::string UniqueRoot(const std::string& tag) {
  static std::atomic<int> n{0};
  return absl::StrCat("/t", getpid(), "-", tag, "-", n.fetch_add(1));
}

namespace {

struct MtlsSuite {
  TestPki pki;
  TestPki::Files suite;
  std::string policy;
  MtlsSuite() {
    CertSpec spec;
    spec.cn = "suite";
    spec.san = absl::StrCat("URI:", kMtlsSuiteIdentity, ",DNS:localhost,IP:127.0.0.1");
    suite = pki.Issue("suite", spec);
    policy = pki.dir() + "/policy.json";
    std::ofstream(policy) << "{\"rules\": [{\"identities\": [\"*\"], \"locks\": [\"\"], "
                             "\"admin\": true, \"description\": \"test suite: permissive\"}]}\n";
    // Children (turnstiled, the CLI, Python and C++ clients) inherit these.
    setenv("TURNSTILE_TLS_CA_FILE", pki.ca_file().c_str(), 1);
    setenv("TURNSTILE_TLS_CERT_FILE", suite.cert.c_str(), 1);
    setenv("TURNSTILE_TLS_KEY_FILE", suite.key.c_str(), 1);
    setenv("TURNSTILE_TLS_CLIENT_CA_FILE", pki.ca_file().c_str(), 1);
    setenv("TURNSTILE_AUTHZ_FILE", policy.c_str(), 1);
  }
};

MtlsSuite* Mtls() {
  static MtlsSuite* suite = [] {
    const char* v = std::getenv("TURNSTILE_TEST_MTLS");
    return v != nullptr && std::string(v) == "1" ? new MtlsSuite() : nullptr;
  }();
  return suite;
}

// Before main: the variables are set before any test spawns a child.
const bool kMtlsDecided = (Mtls(), true);

}  // namespace

bool MtlsMode() { return Mtls() != nullptr; }

std::shared_ptr<grpc::ChannelCredentials> TestChannelCredentials() {
  auto creds = client::MakeChannelCredentials(client::TlsFiles::FromEnv());
  if (!creds.ok()) {
    ADD_FAILURE() << creds.status();
    return grpc::InsecureChannelCredentials();
  }
  return *creds;
}

ReplicaConfig TestConfig(const std::string& zk, const std::string& root) {
  ReplicaConfig c;
  if (MtlsSuite* m = Mtls()) {
    c.tls_cert_file = m->suite.cert;
    c.tls_key_file = m->suite.key;
    c.tls_client_ca_file = m->pki.ca_file();
    c.authz_file = m->policy;
  }
  c.listen = "127.0.0.1:0";
  c.zk = zk;
  c.zk_root = root;
  c.zk_session_timeout = milliseconds(6000);
  // One session: the fault tests replace and expire "the" session 0 (the
  // pool's tests set more).
  c.zk_sessions = 1;
  c.drain_timeout = milliseconds(3000);
  c.log_level = "error";
  c.check_invariants = true;
  return c;
}

std::unique_ptr<Replica> StartReplica(const ReplicaConfig& config,
                                      std::unique_ptr<ZkSession> zk) {
  auto r = Replica::Start(config, std::move(zk));
  if (!r.ok()) {
    ADD_FAILURE() << "replica did not start: " << r.status();
    return nullptr;
  }
  Replica* raw = r->get();
  if (!WaitFor([raw] { return raw->engine().serving(); }, milliseconds(30000))) {
    ADD_FAILURE() << "replica never became serving";
    return std::move(*r);
  }
  // The engine serves (Acquire no longer answers UNAVAILABLE); its health
  // service learns it just after, on the event loop. Where this process
  // can present what the replica requires (plaintext, or the mTLS suite's
  // own configuration), wait for the gRPC health check to say SERVING too,
  // so a test may check health at once. Replicas with a test's own TLS
  // configuration are ready once the engine serves.
  const MtlsSuite* m = Mtls();
  const bool suite_tls = m != nullptr && config.tls_cert_file == m->suite.cert &&
                         config.tls_client_ca_file == m->pki.ca_file();
  if ((config.tls_cert_file.empty() || suite_tls) &&
      !WaitFor([raw] { return IsServing(raw->address()); }, milliseconds(30000))) {
    ADD_FAILURE() << "replica at " << raw->address() << " serves, but its health is not SERVING";
  }
  return std::move(*r);
}

std::unique_ptr<v1::LockService::Stub> NewStub(const std::string& address) {
  return v1::LockService::NewStub(
      grpc::CreateChannel(address, TestChannelCredentials()));
}

v1::AcquireOpen OpenMsg(const std::string& name, milliseconds wait_timeout,
                        const std::string& owner, milliseconds ttl) {
  v1::AcquireOpen o;
  o.set_name(name);
  o.set_owner(owner);
  o.mutable_wait_timeout()->set_seconds(wait_timeout.count() / 1000);
  o.mutable_wait_timeout()->set_nanos(static_cast<int>(wait_timeout.count() % 1000) * 1000000);
  o.mutable_ttl()->set_seconds(ttl.count() / 1000);
  o.mutable_ttl()->set_nanos(static_cast<int>(ttl.count() % 1000) * 1000000);
  return o;
}

AcquireStream::AcquireStream(v1::LockService::Stub* stub,
                             const v1::AcquireOpen& open) {
  rw_ = stub->Acquire(&ctx_);
  v1::AcquireRequest req;
  *req.mutable_open() = open;
  rw_->Write(req);
  reader_ = std::thread([this] { ReadLoop(); });
}

AcquireStream::~AcquireStream() {
  ctx_.TryCancel();
  reader_.join();
}

void AcquireStream::ReadLoop() {
  AcquireEvent ev;
  while (rw_->Read(&ev)) {
    std::lock_guard<std::mutex> l(mu_);
    if (ev.type() == AcquireEvent::STILL_HELD) {
      // Periodic validity refreshes are kept apart: tests await the
      // state changes (still_held_seen() has these).
      still_held_.push_back({std::chrono::steady_clock::now(), ev});
      cv_.notify_all();
      continue;
    }
    if (ev.type() == AcquireEvent::QUEUED) queued_.push_back(ev);
    events_.push_back(ev);
    cv_.notify_all();
  }
  grpc::Status s = rw_->Finish();
  std::lock_guard<std::mutex> l(mu_);
  status_ = s;
  cv_.notify_all();
}

std::optional<AcquireEvent> AcquireStream::Next(milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [this] { return !events_.empty() || status_.has_value(); });
  if (events_.empty()) return std::nullopt;
  AcquireEvent ev = events_.front();
  events_.pop_front();
  return ev;
}

std::optional<AcquireEvent> AcquireStream::Await(AcquireEvent::Type type,
                                                 milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    std::optional<AcquireEvent> ev = Next(left);
    if (!ev) return std::nullopt;
    if (ev->type() == type) return ev;
    if (ev->type() != AcquireEvent::QUEUED) {
      ADD_FAILURE() << "expected event " << AcquireEvent::Type_Name(type)
                    << ", got " << ev->ShortDebugString();
      return std::nullopt;
    }
  }
}

std::optional<AcquireEvent> AcquireStream::AwaitAfterSuspension(AcquireEvent::Type type,
                                                                milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    std::optional<AcquireEvent> ev = Next(left);
    if (!ev) return std::nullopt;
    if (ev->type() == type) return ev;
    if (ev->type() != AcquireEvent::QUEUED && ev->type() != AcquireEvent::SUSPENDED &&
        ev->type() != AcquireEvent::RESUMED) {
      ADD_FAILURE() << "expected event " << AcquireEvent::Type_Name(type) << ", got "
                    << ev->ShortDebugString();
      return std::nullopt;
    }
  }
}

std::optional<grpc::Status> AcquireStream::AwaitEnd(milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [this] { return status_.has_value(); });
  return status_;
}

bool AcquireStream::ended() const {
  std::lock_guard<std::mutex> l(mu_);
  return status_.has_value();
}

std::vector<AcquireStream::Refresh> AcquireStream::still_held_seen() const {
  std::lock_guard<std::mutex> l(mu_);
  return still_held_;
}

std::vector<AcquireEvent> AcquireStream::queued_seen() const {
  std::lock_guard<std::mutex> l(mu_);
  return queued_;
}

void AcquireStream::SendRelease() {
  std::lock_guard<std::mutex> l(write_mu_);
  if (writes_done_) return;
  v1::AcquireRequest req;
  req.mutable_release();
  rw_->Write(req);
}

void AcquireStream::CloseWrites() {
  std::lock_guard<std::mutex> l(write_mu_);
  if (writes_done_) return;
  writes_done_ = true;
  rw_->WritesDone();
}

void AcquireStream::Cancel() { ctx_.TryCancel(); }

SyncZk::SyncZk(const std::string& connect_string) {
  SetZkClientLogLevel("error");
  ZkClientOptions o;
  o.connect_string = connect_string;
  o.session_timeout = milliseconds(10000);
  zk_ = NewZkClientSession(o);
  auto connected = std::make_shared<std::atomic<bool>>(false);
  zk_->SetSessionListener([connected](SessionEvent e) {
    if (e == SessionEvent::kConnected) *connected = true;
  });
  if (!zk_->Start().ok()) ADD_FAILURE() << "SyncZk start failed";
  if (!WaitFor([connected] { return connected->load(); }, milliseconds(30000))) {
    ADD_FAILURE() << "SyncZk could not connect to " << connect_string;
  }
}

SyncZk::~SyncZk() { zk_->Close(); }

absl::StatusOr<std::vector<std::string>> SyncZk::Children(const std::string& path) {
  std::promise<std::pair<ZkCode, std::vector<std::string>>> p;
  zk_->GetChildren(path, [&p](ZkCode c, const std::vector<std::string>& v) {
    p.set_value({c, v});
  });
  auto [code, names] = p.get_future().get();
  if (code == ZkCode::kNoNode) return absl::NotFoundError(path);
  if (code != ZkCode::kOk) return absl::UnavailableError(ZkCodeName(code));
  return names;
}

std::vector<std::string> SyncZk::Contenders(const std::string& lock_path) {
  auto children = Children(lock_path);
  std::vector<std::string> out;
  if (!children.ok()) return out;
  LockQueue view;  // the engine's order
  view.ReplaceWith(*children, [](const std::string&) { return uint64_t{0}; },
                   [](const LockQueue::Entry&) { return false; });
  view.ForFront(view.size(),
                [&](int64_t, int32_t, const LockQueue::Entry& e) { out.push_back(e.node); });
  return out;
}

absl::StatusOr<ZkStat> SyncZk::Exists(const std::string& path) {
  std::promise<std::pair<ZkCode, ZkStat>> p;
  zk_->Exists(path, [&p](ZkCode c, const ZkStat& s) { p.set_value({c, s}); });
  auto [code, stat] = p.get_future().get();
  if (code == ZkCode::kNoNode) return absl::NotFoundError(path);
  if (code != ZkCode::kOk) return absl::UnavailableError(ZkCodeName(code));
  return stat;
}

ZkCode SyncZk::Delete(const std::string& path) {
  std::promise<ZkCode> p;
  zk_->Delete(path, -1, [&p](ZkCode c) { p.set_value(c); });
  return p.get_future().get();
}

ZkCode SyncZk::Create(const std::string& path, const std::string& data, CreateMode mode) {
  std::promise<ZkCode> p;
  zk_->Create(path, data, mode,
              [&p](ZkCode c, const std::string&, const ZkStat&) { p.set_value(c); });
  return p.get_future().get();
}

bool ExpireReplicaSession(const std::string& connect, Replica& replica, size_t session) {
  const int64_t old_id = replica.zk(session).credentials().session_id;
  for (int attempt = 0; attempt < 5; ++attempt) {
    SessionCredentials creds = replica.zk(session).credentials();
    if (creds.session_id != 0 && creds.session_id != old_id) return true;
    if (creds.session_id != 0 && !ExpireZkSession(connect, creds).ok()) continue;
    if (WaitFor([&] {
          int64_t id = replica.zk(session).credentials().session_id;
          return id != 0 && id != old_id;
        }, milliseconds(8000))) {
      return true;
    }
  }
  return false;
}

std::string SessionHex(int64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%" PRIx64, static_cast<uint64_t>(id));
  return buf;
}

bool IsServing(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> creds) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, creds ? creds : TestChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;  // service "": the whole server
  grpc::health::v1::HealthCheckResponse resp;
  return stub->Check(&ctx, req, &resp).ok() &&
         resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

}  // namespace turnstile::testing

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "absl/strings/numbers.h"

extern char** environ;

namespace turnstile::testing {

std::unique_ptr<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  auto child = std::make_unique<ChildProcess>();
  // Its own process group, so its descendants die with it (an orphan would
  // keep the test's output pipe open and hang ctest).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  int rc = posix_spawn(&child->pid_, args[0], &fa, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    ADD_FAILURE() << "cannot spawn " << argv[0];
    return nullptr;
  }
  child->out_fd_ = fds[0];
  return child;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) kill(-pid_, SIGKILL);  // the whole group, reaped or not
  if (pid_ > 0 && !reaped_) waitpid(pid_, nullptr, 0);
  if (out_fd_ >= 0) close(out_fd_);
}

std::optional<std::string> ChildProcess::ReadLine(milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{out_fd_, POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n <= 0) continue;
    char buf[4096];
    ssize_t r = read(out_fd_, buf, sizeof(buf));
    if (r <= 0) return std::nullopt;
    buffer_.append(buf, static_cast<size_t>(r));
  }
}

std::string ChildProcess::ReadSome(milliseconds timeout) {
  pollfd p{out_fd_, POLLIN, 0};
  if (buffer_.empty() && poll(&p, 1, static_cast<int>(timeout.count())) > 0) {
    char buf[4096];
    ssize_t r = read(out_fd_, buf, sizeof(buf));
    if (r > 0) buffer_.append(buf, static_cast<size_t>(r));
  }
  std::string out;
  out.swap(buffer_);
  return out;
}

std::optional<std::string> ChildProcess::AwaitLine(const std::string& prefix, milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    auto line = ReadLine(left);
    if (!line) return std::nullopt;
    if (line->rfind(prefix, 0) == 0) return line;
  }
}

void ChildProcess::Signal(int sig) {
  if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

std::optional<int> ChildProcess::Wait(milliseconds timeout) {
  int status = 0;
  bool exited = WaitFor([&] {
    if (reaped_) return true;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) reaped_ = true;
    return reaped_;
  }, timeout);
  if (!exited) return std::nullopt;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return std::nullopt;
}

std::string TestBinary(const std::string& name) {
  // Tests run from the build tree; CMake passes the locations.
  if (name == "turnstiled") return TURNSTILED_PATH;
  return std::string(TEST_BIN_DIR) + "/" + name;
}

std::optional<ReplicaProcess> SpawnReplicaProcess(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {TestBinary("turnstiled"), "--listen", "127.0.0.1:0",
                                   "--log-level", "error", "--check-invariants"};
  argv.insert(argv.end(), args.begin(), args.end());
  ReplicaProcess r;
  r.process = ChildProcess::Spawn(argv);
  if (!r.process) return std::nullopt;
  absl::StatusOr<std::string> address = AwaitReplicaServing(*r.process);
  if (!address.ok()) {
    ADD_FAILURE() << address.status();
    return std::nullopt;
  }
  r.address = *address;
  return r;
}

absl::StatusOr<std::string> AwaitListeningAddress(ChildProcess& process, milliseconds timeout) {
  // "turnstiled <version> listening on <address> (ZooKeeper ..., root ...)"
  const std::string marker = " listening on ";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    std::optional<std::string> line;
    if (left.count() > 0) line = process.AwaitLine("turnstiled ", left);
    if (!line) {
      std::optional<int> exit = process.Wait(milliseconds(0));
      return absl::DeadlineExceededError(absl::StrCat(
          "turnstiled printed no \"listening on\" line within ", timeout.count(), " ms",
          exit ? absl::StrCat(" (it exited: ", *exit, ")") : std::string()));
    }
    const size_t at = line->find(marker);
    if (at == std::string::npos) continue;
    std::string address = line->substr(at + marker.size());
    return address.substr(0, address.find(' '));
  }
}

absl::StatusOr<std::string> AwaitReplicaServing(ChildProcess& process,
                                                std::shared_ptr<grpc::ChannelCredentials> creds,
                                                milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  absl::StatusOr<std::string> address = AwaitListeningAddress(process, timeout);
  if (!address.ok()) return address.status();
  if (!creds) creds = TestChannelCredentials();
  // One channel for every probe: it connects once, then each Check is one
  // round trip.
  auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(*address, creds));
  std::optional<int> exited;
  const bool serving = WaitFor(
      [&] {
        // Each probe is bounded by 2 s and by what is left of `timeout`.
        const auto left = std::max<std::chrono::steady_clock::duration>(
            deadline - std::chrono::steady_clock::now(), milliseconds(1));
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::min<std::chrono::steady_clock::duration>(left, std::chrono::seconds(2)));
        grpc::health::v1::HealthCheckRequest req;  // service "": readiness
        grpc::health::v1::HealthCheckResponse resp;
        if (health->Check(&ctx, req, &resp).ok() &&
            resp.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
          return true;
        }
        exited = process.Wait(milliseconds(0));
        return exited.has_value();
      },
      std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()));
  if (exited) {
    return absl::UnavailableError(
        absl::StrCat("turnstiled at ", *address, " exited (", *exited, ") before SERVING"));
  }
  if (!serving) {
    return absl::DeadlineExceededError(absl::StrCat(
        "turnstiled at ", *address, " not SERVING within ", timeout.count(), " ms"));
  }
  return address;
}

absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& target) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(absl::StrCat("connect 127.0.0.1:", port, ": ", strerror(errno)));
  }
  std::string req = absl::StrCat("GET ", target, " HTTP/1.0\r\nHost: 127.0.0.1:", port, "\r\n\r\n");
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    return absl::UnavailableError("send failed");
  }
  std::string resp;
  char buf[16384];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::DeadlineExceededError(absl::StrCat("recv: ", strerror(errno)));
    if (n == 0) break;
    resp.append(buf, static_cast<size_t>(n));
  }
  // "HTTP/1.x NNN reason\r\n headers \r\n\r\n body"
  size_t head_end = resp.find("\r\n\r\n");
  HttpResponse out;
  if (resp.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos || resp.size() < 12 ||
      !absl::SimpleAtoi(resp.substr(9, 3), &out.status)) {
    return absl::DataLossError(absl::StrCat("not an HTTP reply: ", resp.substr(0, 80)));
  }
  out.body = resp.substr(head_end + 4);
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool ReplaceFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".new";
  {
    std::ofstream out(tmp);
    out << text;
    if (!out.flush()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

long ResidentKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

std::string UrlEncode(std::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace turnstile::testing
