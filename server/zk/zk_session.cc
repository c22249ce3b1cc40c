// The session's life: the handle made on the loop (Start), its session
// events (connected, disconnected, expired: a new session opened in place
// of an expired one, with backoff while no server name resolves), and its
// end (Close). Also the C client's log level and ExpireZkSession, the
// tests' way to expire a session. Part of ZkClientSession
// (zk_session_internal.h; zookeeper.h is included there only).
#include "server/zk/zk_session.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/common/flags.h"
#include "server/zk/zk_session_internal.h"

namespace turnstile {

void SetZkClientLogLevel(const std::string& level) {
  ZooLogLevel l = ZOO_LOG_LEVEL_WARN;
  if (level == "error") l = ZOO_LOG_LEVEL_ERROR;
  if (level == "info") l = ZOO_LOG_LEVEL_INFO;
  if (level == "debug") l = ZOO_LOG_LEVEL_DEBUG;
  zoo_set_debug_level(l);
}

namespace zk_internal {

ZkClientSession::ZkClientSession(ZkClientOptions options) : options_(std::move(options)) {
  loop_.Start(this, options_.thread_name);
}

ZkClientSession::~ZkClientSession() { Close(); }

// A connect string that does not parse fails here. One whose names do not
// resolve yet (DNS not ready, a Service or container not created yet) does
// not: the replica starts NOT_SERVING and keeps trying, with backoff.
absl::Status ZkClientSession::Start() {
  // The handle is made on the loop thread, its only user.
  std::promise<absl::Status> opened;
  Post([this, &opened] {
    absl::Status s = Open();
    if (!s.ok() && absl::IsUnavailable(s) && zh_ == nullptr) {
      ScheduleRetry(s);
      s = absl::OkStatus();
    }
    opened.set_value(s);
  });
  return opened.get_future().get();
}

void ZkClientSession::Close() {
  {
    absl::MutexLock l(&mu_);
    if (closed_) return;
    closed_ = true;
  }
  loop_.Stop();
  connected_ = false;
  // The loop is gone: this thread is now the handle's only user. Closing
  // a live session sends closeSession, so its ephemerals vanish at once.
  if (zh_ != nullptr) zookeeper_close(zh_);
  zh_ = nullptr;
  stall_.Forget();
  // Calls that never reached ZooKeeper are answered, each exactly once
  // (their callbacks may queue more).
  loop_.RunQueued();
  Watches().DropAll(this);
}

void ZkClientSession::OnSessionEvent(zhandle_t* zh, int type, int state, const char*,
                                     void* ctx) {
  if (type != ZOO_SESSION_EVENT) return;
  auto* self = static_cast<ZkClientSession*>(ctx);
  self->HandleSessionState(zh, state);
}

// On the loop, inside zookeeper_process.
void ZkClientSession::HandleSessionState(zhandle_t* zh, int state) {
  if (zh != zh_) return;  // an old handle's last words
  if (state == ZOO_CONNECTED_STATE) {
    negotiated_timeout_ms_ = zoo_recv_timeout(zh);
    {
      const clientid_t* id = zoo_client_id(zh);
      absl::MutexLock l(&mu_);
      credentials_.session_id = id->client_id;
      credentials_.password.assign(id->passwd, sizeof(id->passwd));
    }
    connected_ = true;
    stall_.HandshakeDone();
    Notify(SessionEvent::kConnected);
  } else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) {
    if (connected_.exchange(false)) Notify(SessionEvent::kDisconnected);
  } else if (state == ZOO_EXPIRED_SESSION_STATE) {
    connected_ = false;
    Watches().DropAll(this);
    if (ZkObserver* o = observer()) o->OnSessionExpired();
    Notify(SessionEvent::kExpired);
    Post([this] { Reopen(); });  // after zookeeper_process has returned
  } else if (state == ZOO_AUTH_FAILED_STATE) {
    connected_ = false;
    Notify(SessionEvent::kAuthFailed);
  }
}

void ZkClientSession::Notify(SessionEvent e) {
  if (listener_) listener_(e);
}

// Replaces an expired handle with a new session. On the loop.
void ZkClientSession::Reopen() {
  if (zh_ != nullptr) zookeeper_close(zh_);  // expired: nothing to send
  zh_ = nullptr;
  {
    absl::MutexLock l(&mu_);
    if (closed_) return;
    credentials_ = SessionCredentials{};
  }
  absl::Status s = Open();
  if (s.ok()) {
    reopen_backoff_ = kMinReopenBackoff;
    return;
  }
  if (zh_ != nullptr) return;  // opened; auth setup failed (kAuthFailed follows)
  // zookeeper_init fails when no server name resolves (a DNS outage often
  // comes with the network trouble that expired the session). Try again
  // with backoff until it works or Close() runs: giving up would leave the
  // replica NOT_SERVING for good.
  ScheduleRetry(s);
}

// On the loop.
void ZkClientSession::ScheduleRetry(const absl::Status& why) {
  std::fprintf(stderr, "turnstile: cannot open a ZooKeeper session (retry in %s): %s\n",
               FormatDuration(reopen_backoff_).c_str(),
               std::string(why.message()).c_str());
  loop_.Schedule(std::chrono::steady_clock::now() + reopen_backoff_, [this] { Reopen(); });
  reopen_backoff_ = std::min(reopen_backoff_ * 2, kMaxReopenBackoff);
}

// On the loop.
absl::Status ZkClientSession::Open() {
  if (options_.before_open) {
    if (absl::Status s = options_.before_open(); !s.ok()) return s;
  }
  zh_ = zookeeper_init(options_.connect_string.c_str(),
                       &ZkClientSession::OnSessionEvent,
                       static_cast<int>(options_.session_timeout.count()), nullptr,
                       this, 0);
  if (zh_ == nullptr) {
    // EINVAL: the connect string does not parse (a configuration error).
    // Anything else (ENOENT, EAGAIN...: getaddrinfo found no address) may
    // pass: Unavailable.
    int err = errno;
    std::string msg = absl::StrCat("zookeeper_init failed for \"", options_.connect_string,
                                   "\": ", std::strerror(err));
    return err == EINVAL ? absl::InvalidArgumentError(msg) : absl::UnavailableError(msg);
  }
  // The C client re-resolves the server names before every poll of its
  // socket by default: a getaddrinfo (a netlink dump) per I/O loop, which
  // profiling showed on every request's path. Names are still resolved
  // on every connection loss, and at most once per window otherwise.
  zoo_set_servers_resolution_delay(zh_, static_cast<int>(kResolutionWindow.count()));
  if (negotiated_timeout_ms_ == 0) {
    negotiated_timeout_ms_ = static_cast<int>(options_.session_timeout.count());
  }
  if (!options_.auth.empty()) {
    auto colon = options_.auth.find(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(
          "ZooKeeper auth must be \"scheme:credentials\"");
    }
    std::string scheme = options_.auth.substr(0, colon);
    std::string cred = options_.auth.substr(colon + 1);
    int rc = zoo_add_auth(zh_, scheme.c_str(), cred.data(),
                          static_cast<int>(cred.size()), nullptr, nullptr);
    if (rc != ZOK) {
      return absl::InvalidArgumentError(
          absl::StrCat("zoo_add_auth failed: ", zerror(rc)));
    }
  }
  return absl::OkStatus();
}

}  // namespace zk_internal

std::unique_ptr<ZkSession> NewZkClientSession(const ZkClientOptions& options) {
  return std::make_unique<zk_internal::ZkClientSession>(options);
}

absl::Status ExpireZkSession(const std::string& connect_string,
                             const SessionCredentials& creds) {
  clientid_t id{};
  id.client_id = creds.session_id;
  std::memcpy(id.passwd, creds.password.data(),
              std::min(creds.password.size(), sizeof(id.passwd)));
  int state = 0;
  auto watcher = [](zhandle_t*, int type, int st, const char*, void* ctx) {
    if (type == ZOO_SESSION_EVENT) *static_cast<int*>(ctx) = st;
  };
  zhandle_t* zh = zookeeper_init(connect_string.c_str(), watcher, 10000, &id, &state, 0);
  if (zh == nullptr) return absl::InternalError("zookeeper_init failed");
  // Single-threaded client: drive it here until the twin is attached.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (state != ZOO_CONNECTED_STATE && state != ZOO_EXPIRED_SESSION_STATE &&
         std::chrono::steady_clock::now() < deadline) {
    int fd = -1, interest = 0;
    struct timeval tv {};
    zookeeper_interest(zh, &fd, &interest, &tv);
    struct pollfd pfd = {fd, static_cast<short>(((interest & ZOOKEEPER_READ) ? POLLIN : 0) |
                                                ((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0)), 0};
    const int timeout_ms = static_cast<int>(std::min<int64_t>(
        100, tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000));
    poll(&pfd, fd >= 0 ? 1 : 0, timeout_ms);
    int events = 0;
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) events |= ZOOKEEPER_READ;
    if (pfd.revents & POLLOUT) events |= ZOOKEEPER_WRITE;
    zookeeper_process(zh, events);
  }
  const bool ok = state == ZOO_CONNECTED_STATE;
  zookeeper_close(zh);  // closing the twin ends the shared session
  if (!ok) return absl::DeadlineExceededError("could not attach to the session");
  return absl::OkStatus();
}

}  // namespace turnstile
