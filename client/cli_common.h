// Shared by the `turnstile` CLI's commands (turnstile_cli.cc,
// cli_coordination.cc): global flags, output, errors, signals, and running
// a command while locks are held.
#ifndef TURNSTILE_CLIENT_CLI_COMMON_H_
#define TURNSTILE_CLIENT_CLI_COMMON_H_

#include <pthread.h>
#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/lib/client.h"
#include "server/flags.h"

namespace turnstile::cli {

using turnstile::FlagSet;
using turnstile::client::AcquireOptions;
using turnstile::client::Client;
using turnstile::client::LockState;
using turnstile::client::LockStatus;
using Millis = std::chrono::milliseconds;

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotAcquired = 75;
constexpr int kExitLost = 76;

struct Globals {
  std::string server = "127.0.0.1:7400";
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string output = "text";
  std::string owner;
  Millis timeout{10000};  // unary calls
  bool json() const { return output == "json"; }
};


void RegisterGlobals(FlagSet* f, Globals* g);
// One line to stdout, flushed.
void PrintLine(const std::string& s);
// Prints the error (text on stderr, or a JSON line); the exit code for it.
int ReportError(const Globals& g, const absl::Status& s);
std::string DefaultOwner();
absl::StatusOr<std::unique_ptr<Client>> Connect(const Globals& g);
// A TLS file that cannot be used ends the command (never a fallback to
// plaintext).
std::shared_ptr<grpc::Channel> Channel(const Globals& g);
absl::Status FromGrpc(const grpc::Status& s);
std::string StatusJson(const std::string& event, const LockStatus& s);

// Stop signals (SIGINT, SIGTERM) are blocked in every thread and taken here.
class StopSignals {
 public:
  StopSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }
  // Waits up to `timeout` (forever if nullopt) for a stop signal; returns it or 0.
  int Wait(std::optional<Millis> timeout) {
    if (!timeout) {
      int sig = 0;
      sigwait(&set_, &sig);
      return sig;
    }
    timespec ts{static_cast<time_t>(timeout->count() / 1000),
                static_cast<long>(timeout->count() % 1000) * 1000000};
    int sig = sigtimedwait(&set_, nullptr, &ts);
    return sig > 0 ? sig : 0;
  }
  const sigset_t& set() const { return set_; }

 private:
  sigset_t set_;
};

// Watches a held lock's status from library callbacks.
struct LockWatch {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<LockStatus> last;   // GUARDED_BY(mu)
  bool lost = false;                // GUARDED_BY(mu)

  void OnChange(const LockStatus& s) {
    std::lock_guard<std::mutex> l(mu);
    last = s;
    // A release this process did not ask for is a loss too; callers read
    // `lost` before they release.
    if (s.state == LockState::kLost || s.state == LockState::kReleased) lost = true;
    cv.notify_all();
  }
};


// How a command run under locks ended.
struct ChildOutcome {
  bool started = false;  // false: it could not be run (the error was printed)
  bool lost = false;     // watch.lost: it was stopped (SIGTERM, SIGKILL after grace)
  int code = 0;          // its exit code, 128+N if a signal N ended it
};
// Runs `argv` (argv[0] looked up on PATH) with `env` added to this
// process's environment (replacing variables of the same names) and the
// default signal mask; forwards SIGINT/SIGTERM to it; stops it (SIGTERM,
// then SIGKILL after `grace`) once `watch` says lost. `running` gets its
// pid once it runs; `started(pid)` runs then.
ChildOutcome RunChild(StopSignals& stop, LockWatch& watch, const std::vector<std::string>& argv,
                      const std::vector<std::string>& env, Millis grace,
                      std::atomic<pid_t>* running, const std::string& what,
                      const std::function<void(pid_t)>& started);

}  // namespace turnstile::cli

#endif  // TURNSTILE_CLIENT_CLI_COMMON_H_
