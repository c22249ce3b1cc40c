// Internal to server/zk/ (zk_session.cc, zk_session_requests.cc,
// zk_session_connection.cc): ZkClientSession, the real ZkSession over the
// ZooKeeper C client. The only file that includes zookeeper.h; never
// include it from outside server/zk/ (zk_session.h is the interface).
//
// Threading: the single-threaded C client (libzookeeper_st). Each session
// has one thread, its EventLoop (event_loop.h), which alone touches the
// zhandle: as the loop's source it tells the loop what to wait for
// (zookeeper_interest), and the loop polls that socket beside its eventfd and
// timers and lets the C client work (zookeeper_process), which runs the
// completions and watchers on this same thread. Calls from other threads
// (and from callbacks) are queued and issued by the loop in call order, so
// ZooKeeper sees one session's requests in the order they were made. The
// multithreaded client spent an I/O thread and a completion thread per
// session, a pipe write to wake the first for every request and a
// condition-variable hand-off to the second for every reply.
//
// Ownership: every asynchronous call allocates one CallContext that the C
// client hands back to exactly one completion, which frees it. Watchers are
// not owned by the C client: a per-call watcher is registered here under a
// numeric id (the C client only sees the id), so a watch that never fires (the
// session expired or closed) is dropped with the registry instead of leaking.
//
// Locks: a session's loop's work queue, its mu_ and the watch registry's are
// leaves, taken by callers that may hold the engine's or the observers'
// lock; neither is held while a callback runs.
//
// Short outages (a replica cut from ZooKeeper for a second or two, well
// within the session): the loop watches its connection and replaces one
// that waits on TCP rather than on ZooKeeper (tcp_stall.h), and reports a
// connection the C client dropped without telling (after a failed send).
// Measured with tests/nemesis/short_outage.py.
#ifndef TURNSTILE_SERVER_ZK_ZK_SESSION_INTERNAL_H_
#define TURNSTILE_SERVER_ZK_ZK_SESSION_INTERNAL_H_

#include <zookeeper/zookeeper.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/zk/event_loop.h"
#include "server/zk/tcp_stall.h"
#include "server/zk/watch_registry.h"
#include "server/zk/zk_session.h"

namespace turnstile {
namespace zk_internal {

class ZkClientSession final : public ZkSession, private EventLoop::Source {
 public:
  // The session's life (zk_session.cc).
  explicit ZkClientSession(ZkClientOptions options);
  ~ZkClientSession() override;

  void SetSessionListener(SessionListener listener) override {
    listener_ = std::move(listener);
  }
  absl::Status Start() override;
  void Close() override;

  bool connected() const override { return connected_.load(); }

  std::chrono::milliseconds session_timeout() const override {
    return std::chrono::milliseconds(negotiated_timeout_ms_.load());
  }

  SessionCredentials credentials() const override {
    absl::MutexLock l(&mu_);
    return credentials_;
  }
  EventLoop* loop() override { return &loop_; }

  // Requests (zk_session_requests.cc).
  void Create(const std::string& path, const std::string& data,
              CreateMode mode, CreateCallback done) override;
  void Delete(const std::string& path, int32_t version,
              VoidCallback done) override;
  void Multi(std::vector<ZkMultiOp> ops, MultiCallback done) override;
  uint64_t GetData(const std::string& path, Watcher watcher,
                   DataCallback done) override;
  void RemoveWatch(const std::string& path, uint64_t key, bool only_watcher) override;
  void SetData(const std::string& path, const std::string& data,
               int32_t version, StatCallback done) override;
  void GetChildren(const std::string& path, ChildrenCallback done) override;
  void GetChildrenStat(const std::string& path, ChildrenStatCallback done) override;
  void Exists(const std::string& path, StatCallback done) override;
  uint64_t GetChildrenWatch(const std::string& path, Watcher watcher,
                            ChildrenStatCallback done) override;
  uint64_t ExistsWatch(const std::string& path, Watcher watcher, StatCallback done) override;
  void Sync(const std::string& path, VoidCallback done) override;

 private:
  // ---- Requests and watchers (zk_session_requests.cc) -------------------
  struct CallContext;  // one asynchronous call: its callback, freed once
  struct ACL_vector* Acl() const;
  void Issue(CallContext* ctx, std::function<int(zhandle_t*)> call);
  static void DropWatcher(uint64_t id);
  static void OnCreate(int rc, const char* value, const struct Stat* stat,
                       const void* data);
  static void OnVoid(int rc, const void* data);
  static void OnSynced(int rc, const char*, const void* data);
  static void OnData(int rc, const char* value, int value_len,
                     const struct Stat* stat, const void* data);
  static void OnWatchRemoved(int, const void*);
  static void OnMulti(int rc, const void* data);
  static void OnStat(int rc, const struct Stat* stat, const void* data);
  static void OnChildrenStat(int rc, const struct String_vector* strings,
                             const struct Stat* stat, const void* data);
  static void OnWatch(zhandle_t*, int type, int, const char*, void* wctx);

  using WatchRegistry = zk_internal::WatchRegistry<ZkClientSession, Watcher>;
  static WatchRegistry& Watches();

  // ---- The session's life (zk_session.cc) -------------------------------
  static void OnSessionEvent(zhandle_t* zh, int type, int state, const char*,
                             void* ctx);
  void HandleSessionState(zhandle_t* zh, int state);
  void Notify(SessionEvent e);
  void Reopen();
  void ScheduleRetry(const absl::Status& why);
  absl::Status Open();

  // Queues `fn` for the loop (in call order; see event_loop.h).
  void Post(std::function<void()> fn) { loop_.Post(std::move(fn)); }

  // ---- The connection on the loop (zk_session_connection.cc) -----------
  EventLoop::Interest Prepare() override;
  void NoticeSilentClose();
  int WatchConnection(int fd);
  void Abandon(int fd, bool path_up, const char* why);
  void Dispatch(short revents) override;

  const ZkClientOptions options_;
  SessionListener listener_;

  // The loop's own (Close runs the last completions after the loop ended).
  int in_flight_ = 0;  // requests the C client holds (a completion pending)
  bool silently_closed_ = false;  // see NoticeSilentClose
  TcpStallWatch stall_{[this] {
    const char* server = zh_ != nullptr ? zoo_get_current_server(zh_) : nullptr;
    return std::string(server != nullptr ? server : "");
  }};

  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  SessionCredentials credentials_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> connected_{false};
  std::atomic<int> negotiated_timeout_ms_{0};

  // The loop's own (then Close's, once the loop has ended).
  zhandle_t* zh_ = nullptr;
  static constexpr std::chrono::milliseconds kResolutionWindow{5000};
  static constexpr std::chrono::milliseconds kMinReopenBackoff{250};
  static constexpr std::chrono::milliseconds kMaxReopenBackoff{10000};
  std::chrono::milliseconds reopen_backoff_ = kMinReopenBackoff;
  // Last: its thread must not outlive what it touches (Close stops it).
  EventLoop loop_;
};

}  // namespace zk_internal
}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ZK_ZK_SESSION_INTERNAL_H_
