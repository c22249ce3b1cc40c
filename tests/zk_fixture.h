// ZkServer runs a real, standalone ZooKeeper server (Debian's `zookeeper`
// package, a Java process) for tests: on a free 127.0.0.1 port, in a fresh
// temporary directory, as a child process that is stopped by PID.
// ZkServer is thread-safe: any method may be called from any thread, although
// Stop()/Restart() racing with clients of the server is the test's business.

#ifndef TURNSTILE_TESTS_ZK_FIXTURE_H_
#define TURNSTILE_TESTS_ZK_FIXTURE_H_

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace turnstile::testing {

class ZkServer {
 public:
  // Starts a standalone server on a free loopback port in a new temp dir and
  // waits (up to 60 s) until it answers `ruok` with `imok`. If the port was
  // taken between picking and binding it, retries with another port.
  // On failure the error contains the tail of the server log.
  static absl::StatusOr<std::unique_ptr<ZkServer>> Start();

  ZkServer(const ZkServer&) = delete;
  ZkServer& operator=(const ZkServer&) = delete;

  // Stop() if running, then removes the temp dir recursively (kept, and its
  // path printed, if the environment variable TURNSTILE_KEEP_ZK_DIR is set).
  // If the test program dies without running destructors (crash, SIGKILL),
  // the server gets SIGKILL too, provided Start() ran on the main thread.
  ~ZkServer();

  // "127.0.0.1:<port>"; stays the same across Stop()/Restart().
  std::string ConnectString() const;
  int port() const { return port_; }
  // The temp dir: zoo.cfg, data/ and zk.log (the server's stdout+stderr).
  const std::string& dir() const { return dir_; }

  // Whether the server process is alive (it is reaped if it died on its own).
  bool running() const;

  // SIGTERM, wait up to 10 s, then SIGKILL. Idempotent: OK if not running.
  absl::Status Stop();

  // Stop()s the server if it is running, then starts it again on the SAME
  // port and data dir and waits for `ruok`. Sessions survive as long as
  // clients reconnect within their session timeout.
  absl::Status Restart();

  // Sends a four-letter word (ruok, mntr, wchc, wchs, wchp, cons, stat,
  // srvr, conf...) and returns the full reply. Fails with Unavailable if the
  // server does not accept connections, DeadlineExceeded after 5 s.
  absl::StatusOr<std::string> FourLetterWord(std::string_view cmd) const;

  // `mntr` as key -> value, e.g. "zk_watch_count" -> "3",
  // "zk_version" -> "3.8.0-..., built on ...".
  absl::StatusOr<std::map<std::string, std::string>> Mntr() const;

  // `wchc` parsed: session id as printed by the server ("0x100008a2c9e0000",
  // i.e. lowercase hex without leading zeros) -> watched paths, in server
  // order. Sessions without watches are absent.
  // NOTE: ZooKeeper 3.8 lists only data watches here (zoo_wget, zoo_wexists,
  // persistent watches), NOT child watches (zoo_wget_children). For a total
  // that includes child watches use Mntr()["zk_watch_count"].
  absl::StatusOr<std::map<std::string, std::vector<std::string>>>
  WatchesBySession() const;

  // `wchp` parsed: watched path -> session ids. Same caveat as above.
  absl::StatusOr<std::map<std::string, std::vector<std::string>>>
  WatchesByPath() const;

  // The last `lines` lines of zk.log, for failure messages.
  std::string LogTail(int lines = 40) const;

 private:
  friend ZkServer& SharedZkServer();

  ZkServer(std::string dir, int port);

  absl::Status WriteConfig() const;
  // Forks the server and waits until it serves. On failure the process is
  // gone; *address_in_use tells whether it failed to bind the port.
  absl::Status LaunchAndWait(bool* address_in_use);
  absl::Status Launch();
  absl::Status StopLocked();
  absl::StatusOr<std::string> FourLetterWordWithTimeout(
      std::string_view cmd, std::chrono::milliseconds timeout) const;
  std::string LogPath() const;

  const std::string dir_;  // Empty for the placeholder SharedZkServer() hands
                           // out when the shared server failed to start.
  const int port_;
  const pid_t owner_pid_;  // Only this process may signal/reap the child
                           // (not e.g. a forked death-test child).

  // Serializes Start/Stop/Restart and guards pid_.
  mutable std::mutex mu_;
  mutable pid_t pid_ = -1;  // -1 when not running. Mutable: running() reaps.
};

// A port on 127.0.0.1 that was free a moment ago (bound with port 0, then
// closed), for servers a test starts itself. Another process may take it in
// between; callers that can retry on "address in use" should.
int FreeLoopbackPort();

// A process-wide shared server for tests that do not stop/restart ZooKeeper.
// Started lazily on first use and stopped when the test program finishes
// (gtest global environment TearDown, with an atexit() fallback), also when
// tests fail. Tests that must stop or restart a server create their own
// ZkServer. If the server cannot start, the calling test gets a failure with
// the reason and a placeholder that is not running (port 0).
// Tests share it, so they should use unique znode paths.
ZkServer& SharedZkServer();

}  // namespace turnstile::testing

#endif  // TURNSTILE_TESTS_ZK_FIXTURE_H_
