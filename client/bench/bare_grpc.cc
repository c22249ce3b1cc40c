// W5's baseline: turnstile-bare-server as a child process, and W5's idle
// streams opened to it.
#include "client/bench/bare_grpc.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "client/bench/acquire_call.h"

namespace turnstile::bench {
namespace {

constexpr Millis kListenTimeout(10000);
constexpr Millis kStopTimeout(10000);

// turnstile-bare-server as a child of this process: started on a free
// loopback port, stopped by its pid. The child gets SIGTERM if this thread
// ends first (PR_SET_PDEATHSIG), so a killed bench leaves no server behind.
class BareServerProcess {
 public:
  ~BareServerProcess() {
    if (pid_ > 0) Stop();
    if (out_ >= 0) close(out_);
  }

  // Starts `path` (with --grant if `grant`) and waits for its "listening on
  // PORT" line.
  bool Start(const std::string& path, std::string* error, bool grant = false) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      *error = "pipe: " + std::string(std::strerror(errno));
      return false;
    }
    // Prepared before fork: the child may only make async-signal-safe calls.
    const char* argv[] = {path.c_str(), "--listen", "127.0.0.1:0", grant ? "--grant" : nullptr,
                          nullptr};
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
      *error = "fork: " + std::string(std::strerror(errno));
      close(fds[0]);
      close(fds[1]);
      return false;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(127);  // the bench is already gone
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      signal(SIGTERM, SIG_DFL);
      dup2(fds[1], 1);
      execv(argv[0], const_cast<char* const*>(argv));
      _exit(127);
    }
    close(fds[1]);
    pid_ = started_pid_ = pid;
    out_ = fds[0];
    const Clock::time_point deadline = Clock::now() + kListenTimeout;
    std::string line;
    while (line.find('\n') == std::string::npos) {
      if (!ReadSome(deadline, &line)) break;
    }
    const std::string prefix = "listening on ";
    if (line.rfind(prefix, 0) == 0) port_ = std::atoi(line.c_str() + prefix.size());
    if (port_ > 0) return true;
    const int status = Stop();
    *error = path + (line.empty() ? " printed nothing" : " printed \"" + line + "\"") +
             " (exit status " + std::to_string(status) + "), not \"listening on PORT\"";
    return false;
  }

  // SIGTERM, then waits for the exit until kStopTimeout (its stdout
  // closing), SIGKILL after that. The exit status, or 128 + the signal that
  // ended it.
  int Stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    const Clock::time_point deadline = Clock::now() + kStopTimeout;
    std::string ignored;
    while (ReadSome(deadline, &ignored)) ignored.clear();
    // EOF: the process is exiting (or ignored SIGTERM until the deadline).
    if (Clock::now() >= deadline) kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_status_;
  }

  int started_pid() const { return started_pid_; }
  int port() const { return port_; }
  int exit_status() const { return exit_status_; }  // -1 until stopped

 private:
  // Appends what the server wrote, waiting until `deadline`; false at EOF
  // or the deadline.
  bool ReadSome(Clock::time_point deadline, std::string* out) {
    for (;;) {
      const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{out_, POLLIN, 0};
      const int n = poll(&p, 1, static_cast<int>(left));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      char buf[256];
      const ssize_t got = read(out_, buf, sizeof(buf));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      out->append(buf, static_cast<size_t>(got));
      return true;
    }
  }

  pid_t pid_ = -1;  // until reaped
  pid_t started_pid_ = 0;
  int out_ = -1;
  int port_ = 0;
  int exit_status_ = -1;
};

// The streams' shared state. Callbacks run on the client's one completion-queue thread.
struct IdleState {
  std::vector<std::unique_ptr<v1::LockService::Stub>> stubs;
  std::mutex mu;
  std::condition_variable cv;
  int queued = 0;           // GUARDED_BY(mu) streams that got their QUEUED
  int failed = 0;           // GUARDED_BY(mu) streams that ended before the cancel
  std::string first_error;  // GUARDED_BY(mu)
  std::atomic<bool> cancelling{false};
  CallTracker tracker;  // last: destroyed (reaping calls) first
};

double Mb(int64_t bytes) { return bytes < 0 ? NAN : bytes / 1048576.0; }

}  // namespace

BareGrpcResult MeasureBareGrpc(const BenchOptions& o, const std::vector<IdleStream>& streams) {
  BareGrpcResult r;
  r.streams = static_cast<int>(streams.size());
  BareServerProcess server;
  const bool started = server.Start(o.bare_server, &r.error);
  r.pid = server.started_pid();
  r.exit_status = server.exit_status();
  if (!started) return r;
  const std::string target = "127.0.0.1:" + std::to_string(server.port());

  auto s = std::make_unique<IdleState>();
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < std::max(1, o.w5_channels); ++i) {
    channels.push_back(MakeChannel(target, 5000 + i));  // as W5's own channels
    s->stubs.push_back(v1::LockService::NewStub(channels.back()));
  }
  if (!ConnectAll(channels, target, &r.error)) {
    r.error = "turnstile-bare-server: " + r.error;
    r.exit_status = server.Stop();
    return r;
  }
  r.rss_before_mb = Mb(ProcessRssBytes(r.pid));

  const Millis open_budget = Millis(60000) + Millis(5) * r.streams;
  const Clock::time_point start = Clock::now();
  const Clock::time_point rpc_deadline = start + open_budget + o.w5_idle + Millis(60000);
  IdleState* const state = s.get();
  for (const IdleStream& stream : streams) {
    auto* c = new AcquireCall(
        &s->tracker,
        [state](AcquireCall* c, const AcquireEvent& e, Clock::time_point) {
          if (e.type() != AcquireEvent::QUEUED || c->queued_events != 1) return;
          std::lock_guard<std::mutex> l(state->mu);
          ++state->queued;
          state->cv.notify_all();
        },
        [state, name = stream.open->name()](AcquireCall* c, const grpc::Status& st,
                                            Clock::time_point) {
          if (state->cancelling.load()) return;
          std::lock_guard<std::mutex> l(state->mu);
          if (state->failed++ == 0) state->first_error = DescribeFailure(name, *c, st);
          state->cv.notify_all();
        });
    c->Start(s->stubs[stream.channel % s->stubs.size()].get(), *stream.open, rpc_deadline,
             /*hold=*/false);
  }
  {
    std::unique_lock<std::mutex> l(s->mu);
    if (!s->cv.wait_for(l, open_budget,
                        [&] { return s->queued == r.streams || s->failed > 0; }) ||
        s->failed > 0) {
      r.error = "turnstile-bare-server: streams QUEUED " + std::to_string(s->queued) + "/" +
                std::to_string(r.streams) +
                (s->first_error.empty() ? "" : "; the first failure: " + s->first_error);
    }
  }
  if (r.error.empty()) {
    r.open_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::this_thread::sleep_for(o.w5_idle);  // the replica's window, for the same state
    r.rss_waiting_mb = Mb(ProcessRssBytes(r.pid));
  }

  s->cancelling = true;
  s->tracker.CancelAll();
  if (!s->tracker.WaitIdle(Clock::now() + Millis(30000))) {
    if (r.error.empty()) r.error = "turnstile-bare-server: streams did not end after cancellation";
    s.release();  // leak rather than free what callbacks may still use
  }
  r.exit_status = server.Stop();
  if (r.error.empty() && r.exit_status != 0) {
    r.error = "turnstile-bare-server exited with status " + std::to_string(r.exit_status) +
              " on SIGTERM";
  }
  return r;
}

struct BareCycles::State {
  BareServerProcess server;
  BenchOptions options;  // o, aimed at the bare server
  std::unique_ptr<TurnstileCycles> cycles;
};

BareCycles::BareCycles() : state_(std::make_unique<State>()) {}

BareCycles::~BareCycles() {
  state_->cycles.reset();  // its channels close before the server stops
}

bool BareCycles::Start(const BenchOptions& o, const std::vector<std::string>& names,
                       std::string* error) {
  if (!state_->server.Start(o.bare_server, error, /*grant=*/true)) return false;
  state_->options = o;
  state_->options.server = "127.0.0.1:" + std::to_string(state_->server.port());
  state_->options.server_pid = state_->server.started_pid();
  state_->options.zk_pid = 0;  // no ZooKeeper on this side
  state_->cycles = std::make_unique<TurnstileCycles>(state_->options, names);
  if (!state_->cycles->Connect(error)) {
    *error = "turnstile-bare-server: " + *error;
    return false;
  }
  return true;
}

CycleSamples BareCycles::Run(Millis duration, SideUsage* usage) {
  UsageMeter meter(state_->options);
  return meter.Measure(usage, true, [&] { return state_->cycles->Run(duration); });
}

}  // namespace turnstile::bench
