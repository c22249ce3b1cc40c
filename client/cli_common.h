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
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/common/flags.h"
#include "client/lib/client.h"

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
// `turnstile check`: the token is not a current hold's (SUPERSEDED), or
// belongs to a contender that still waits (WAITING).
constexpr int kExitSuperseded = 77;
constexpr int kExitWaiting = 78;
// `run` / `elect`: the command could not be started (not found, not
// executable), as a shell's 127; the lock was let go.
constexpr int kExitCannotRun = 127;

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

// The stop signals, SIGINT, SIGTERM and SIGHUP, are blocked in every
// thread (the object is made first in main, before any other thread) and
// taken by one thread of its own, which acts by phase:
//   - at first (and for the commands that only make unary calls): the
//     process exits at once with 128+N;
//   - waiting for a lock (BeginWait .. EndWait; acquire, run, elect): the
//     first one abandons every wait of the process (client::AbandonWaits:
//     the Acquire stream is cancelled and the replica deletes the waiting
//     node at once) and EndWait returns it; the command then exits 128+N
//     without starting anything;
//   - holding (after EndWait): each is queued for Wait (`acquire` releases,
//     `run` and `elect` pass it to their command, `observe` stops).
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Enters the waiting phase.
  void BeginWait();
  // Leaves it: the signal that abandoned the wait (and `start` is not run),
  // or 0 after running `start` (if set) and entering the holding phase. A
  // signal that comes while `start` runs waits for it, then is queued: so
  // a command is started only if no signal abandoned the wait, and a signal
  // after that reaches it.
  int EndWait(const std::function<void()>& start = nullptr);
  // The signal that abandoned the wait so far, or 0 (a check before
  // printing that a lock was granted; EndWait decides).
  int Abandoned();
  // Holding phase: the next stop signal; 0 when `timeout` passes (nullopt:
  // none) or Wake() was called.
  int Wait(std::optional<Millis> timeout);
  void Wake();
  const sigset_t& set() const { return set_; }

 private:
  enum class Phase { kExit, kWaiting, kHolding };
  void Run();

  sigset_t set_;
  std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::kExit;  // GUARDED_BY(mu_)
  int abandoned_ = 0;           // GUARDED_BY(mu_) the signal that ended the wait
  std::deque<int> queue_;       // GUARDED_BY(mu_) signals for Wait
  bool woken_ = false;          // GUARDED_BY(mu_)
  bool quit_ = false;           // GUARDED_BY(mu_)
  std::thread thread_;
};

// "SIGINT", "SIGTERM", "SIGHUP", or "signal N".
std::string SignalName(int sig);
// Reports a wait abandoned by `sig` (stderr, or a JSON line) and returns
// the exit code for it: 128 + sig, as a shell's.
int ReportAbandoned(const Globals& g, int sig, const std::string& what);

// Help: a command's usage line, what it does, its own flags with their
// defaults and variables, then the global flags; one "Usage:" header.
std::string CommandHelp(const std::string& usage, const std::string& about, const FlagSet* own);
// The flag lines of f.Usage() (without its header).
std::string FlagLines(const FlagSet& f);

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
  int abandoned = 0;     // the stop signal that came before CMD started (it never ran)
  bool started = false;  // false: it could not be run (the error was printed) or abandoned
  bool lost = false;     // watch.lost: it was stopped (SIGTERM, SIGKILL after grace)
  int code = 0;          // its exit code, 128+N if a signal N ended it
};
// Ends the waiting phase of `stop` and, unless a stop signal abandoned the
// wait, runs `argv` (argv[0] looked up on PATH) with `env` added to this
// process's environment (replacing variables of the same names), the
// default signal mask, and SIGKILL as its parent-death signal (it does not
// outlive this process, even one killed with SIGKILL: call this on the
// main thread, the signal is tied to the thread that forks). Forwards
// SIGINT/SIGTERM to it (SIGHUP as SIGTERM); stops it (SIGTERM, then SIGKILL
// after `grace`) once `watch` says lost. Returns once it has exited.
// `running` gets its pid once it runs; `started(pid)` runs then.
ChildOutcome RunChild(StopSignals& stop, LockWatch& watch, const std::vector<std::string>& argv,
                      const std::vector<std::string>& env, Millis grace,
                      std::atomic<pid_t>* running, const std::string& what,
                      const std::function<void(pid_t)>& started);

}  // namespace turnstile::cli

#endif  // TURNSTILE_CLIENT_CLI_COMMON_H_
