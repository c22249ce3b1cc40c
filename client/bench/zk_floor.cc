// The raw-ZooKeeper floor, driven from the bench: turnstile-zk-floor
// (server/zk_floor) runs the floor's workloads over ZkSession in a process
// of its own; this file starts it, sends it one command per line and parses
// its one-line replies (the protocol is in server/zk_floor/main.cc).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>
#include <vector>

#include "client/bench/bench_internal.h"

namespace turnstile::bench {

// turnstile-zk-floor as a child of this process. The child gets SIGTERM if
// the bench's thread ends first (PR_SET_PDEATHSIG), so a killed bench
// leaves no floor behind.
class FloorProcess {
 public:
  ~FloorProcess() {
    if (in_ >= 0) close(in_);  // end of its stdin: it deletes its root, exits
    if (pid_ > 0) Reap(Clock::now() + Millis(30000));
    if (out_ >= 0) close(out_);
  }

  // Starts `program --zk zk [--root root]` and waits for its "ready".
  bool Start(const std::string& program, const std::string& zk, const std::string& root,
             std::string* error) {
    if (program.empty()) {
      *error = "turnstile-zk-floor not found next to this program";
      return false;
    }
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0) {
      *error = "pipe: " + std::string(std::strerror(errno));
      return false;
    }
    if (pipe2(from_child, O_CLOEXEC) != 0) {
      *error = "pipe: " + std::string(std::strerror(errno));
      close(to_child[0]);
      close(to_child[1]);
      return false;
    }
    // A floor that died must not kill the bench when a command is written
    // to it: the write fails with EPIPE instead (and the bench reports it).
    signal(SIGPIPE, SIG_IGN);
    // Prepared before fork: the child may only make async-signal-safe calls.
    std::vector<const char*> argv = {program.c_str(), "--zk", zk.c_str()};
    if (!root.empty()) {
      argv.push_back("--root");
      argv.push_back(root.c_str());
    }
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
      *error = "fork: " + std::string(std::strerror(errno));
      for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) close(fd);
      return false;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(127);  // the bench is already gone
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      signal(SIGTERM, SIG_DFL);
      signal(SIGPIPE, SIG_DFL);
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      execv(argv[0], const_cast<char* const*>(argv.data()));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    pid_ = started_pid_ = pid;
    in_ = to_child[1];
    out_ = from_child[0];
    std::string line;
    if (!ReadLine(Clock::now() + Millis(30000), &line)) {
      *error = program + " did not answer within 30 s";
    } else if (line != "ready") {
      *error = line.rfind("error ", 0) == 0 ? line.substr(6) : program + ": \"" + line + "\"";
    } else {
      return true;
    }
    close(in_);
    in_ = -1;
    Reap(Clock::now() + Millis(10000));
    return false;
  }

  // Sends `command` and returns its reply line; false + *error if the floor
  // did not answer by `deadline` (it is then stopped).
  bool Call(const std::string& command, Clock::time_point deadline, std::string* reply,
            std::string* error) {
    if (pid_ <= 0 || in_ < 0) {
      *error = "turnstile-zk-floor is not running";
      return false;
    }
    const std::string line = command + "\n";
    size_t sent = 0;
    while (sent < line.size()) {
      const ssize_t n = write(in_, line.data() + sent, line.size() - sent);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        *error = "turnstile-zk-floor: write: " + std::string(std::strerror(errno));
        return false;
      }
      sent += static_cast<size_t>(n);
    }
    if (ReadLine(deadline, reply)) return true;
    *error = "turnstile-zk-floor did not answer \"" + command.substr(0, 40) + "\" in time";
    kill(pid_, SIGKILL);
    close(in_);
    in_ = -1;
    Reap(Clock::now() + Millis(10000));
    return false;
  }

  int pid() const { return started_pid_; }

 private:
  // One line from the floor's stdout (without its '\n'), by `deadline`.
  bool ReadLine(Clock::time_point deadline, std::string* line) {
    for (;;) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        *line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return true;
      }
      const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{out_, POLLIN, 0};
      const int n = poll(&p, 1, static_cast<int>(left));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      char buf[65536];
      const ssize_t got = read(out_, buf, sizeof(buf));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      buffer_.append(buf, static_cast<size_t>(got));
    }
  }

  // Waits for the exit until `deadline`, SIGKILL after that.
  void Reap(Clock::time_point deadline) {
    int status = 0;
    while (Clock::now() < deadline) {
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) {
        pid_ = -1;
        return;
      }
      // Its stdout closes when it exits: wait for that, not a fixed time.
      pollfd p{out_, POLLIN, 0};
      poll(&p, 1, 100);
      if (p.revents != 0) {
        char buf[4096];
        if (read(out_, buf, sizeof(buf)) <= 0) {
          waitpid(pid_, &status, 0);
          pid_ = -1;
          return;
        }
      }
    }
    kill(pid_, SIGKILL);
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  pid_t pid_ = -1;  // until reaped
  pid_t started_pid_ = 0;
  int in_ = -1;
  int out_ = -1;
  std::string buffer_;
};

namespace {

// A reply's "ok" or "error TEXT".
bool ReplyOk(std::istringstream& in, const std::string& reply, std::string* error) {
  std::string status;
  in >> status;
  if (status == "ok") return true;
  *error = status == "error" && reply.size() > 6 ? reply.substr(6) : "turnstile-zk-floor: \"" +
                                                                         reply.substr(0, 80) + "\"";
  return false;
}

bool ReadList(std::istringstream& in, std::vector<double>* out) {
  size_t n = 0;
  if (!(in >> n)) return false;
  out->resize(n);
  for (double& v : *out) {
    if (!(in >> v)) return false;
  }
  return true;
}

CycleSamples ParseSamples(const std::string& reply) {
  CycleSamples r;
  r.slices = 1;
  std::istringstream in(reply);
  if (!ReplyOk(in, reply, &r.error)) {
    r.errors = 1;
    return r;
  }
  if (!(in >> r.cycles >> r.seconds >> r.errors) || !ReadList(in, &r.cycle_ms) ||
      !ReadList(in, &r.handoff_ms)) {
    r.errors = 1;
    r.error = "turnstile-zk-floor: bad reply \"" + reply.substr(0, 80) + "\"";
    return r;
  }
  std::getline(in >> std::ws, r.error);
  return r;
}

CycleSamples FailedSlice(const std::string& error) {
  CycleSamples r;
  r.slices = 1;
  r.errors = 1;
  r.error = error;
  return r;
}

// How long a command may take beyond its own duration (the floor waits up
// to 40 s for its loops to finish).
constexpr Millis kReplySlack(60000);

}  // namespace

std::unique_ptr<Floor> Floor::Open(const BenchOptions& o, std::string* error) {
  std::unique_ptr<Floor> f(new Floor());
  f->zk_connect_ = o.zk;
  f->root_ = "/turnstile-bench-floor-" + o.run_tag;
  f->process_ = std::make_unique<FloorProcess>();
  if (!f->process_->Start(o.zk_floor, o.zk, f->root_, error)) return nullptr;
  return f;
}

Floor::~Floor() = default;

int Floor::pid() const { return process_->pid(); }

CycleSamples Floor::Slice(const std::string& command, Millis duration) {
  std::string reply, error;
  if (!process_->Call(command, Clock::now() + duration + kReplySlack, &reply, &error)) {
    return FailedSlice(error);
  }
  return ParseSamples(reply);
}

CycleSamples Floor::Cycles(const std::string& tag, int loops, Millis duration) {
  return Slice("cycles " + tag + " " + std::to_string(loops) + " " +
                   std::to_string(duration.count()),
               duration);
}

CycleSamples Floor::ContendedLock(const std::string& tag, int clients, Millis duration) {
  return Slice("contended " + tag + " " + std::to_string(clients) + " " +
                   std::to_string(duration.count()),
               duration);
}

CycleSamples Floor::DeleteToWatch(const std::string& tag, Millis duration) {
  return Slice("delete-to-watch " + tag + " " + std::to_string(duration.count()), duration);
}

HerdResult Floor::Chain(const std::string& tag, int n) {
  HerdResult r;
  r.n = n;
  // Each of the floor's steps (creates, watches, the drain) is bounded by
  // 30 s + 50 ms per node.
  const Millis step = Millis(30000) + Millis(50) * n + kReplySlack;
  std::string reply;
  if (!process_->Call("chain-arm " + tag + " " + std::to_string(n), Clock::now() + step, &reply,
                      &r.error)) {
    return r;
  }
  std::istringstream arm(reply);
  if (!ReplyOk(arm, reply, &r.error)) return r;

  Mntr before, after;
  std::string mntr_error;
  if (!ReadMntr(zk_connect_, &before, &mntr_error)) {
    r.error = "mntr: " + mntr_error;
    return r;
  }
  if (!process_->Call("chain-drain", Clock::now() + step, &reply, &r.error)) return r;
  std::istringstream in(reply);
  if (!ReplyOk(in, reply, &r.error)) return r;
  std::vector<double> handoffs;
  if (!(in >> r.drain_seconds) || !ReadList(in, &handoffs)) {
    r.error = "turnstile-zk-floor: bad reply \"" + reply.substr(0, 80) + "\"";
    return r;
  }
  if (!ReadMntrWhen(zk_connect_, "zk_sum_node_deleted_watch_count",
                    MntrValue(before, "zk_sum_node_deleted_watch_count") + n,
                    std::chrono::steady_clock::now() + Millis(5000), &after, &mntr_error)) {
    r.error = "mntr: " + mntr_error;
    return r;
  }
  r.handoffs = handoffs.size();
  r.handoff = Summarize(std::move(handoffs));
  r.handoffs_per_second = r.drain_seconds > 0 ? r.handoffs / r.drain_seconds : 0;
  r.zk = CounterDelta(before, after);
  if (r.handoffs > 0) {
    r.packets_per_handoff = r.zk.packets / r.handoffs;
    r.notifications_per_handoff = r.zk.notifications / r.handoffs;
  }
  return r;
}

bool CountChildren(const BenchOptions& o, const std::vector<std::string>& paths,
                   std::vector<int>* counts, std::string* error) {
  FloorProcess floor;
  if (!floor.Start(o.zk_floor, o.zk, /*root=*/"", error)) return false;
  std::string command = "count";
  for (const std::string& p : paths) command += " " + p;
  std::string reply;
  if (!floor.Call(command, Clock::now() + Millis(10000) * (1 + paths.size() / 100) + kReplySlack,
                  &reply, error)) {
    return false;
  }
  std::istringstream in(reply);
  if (!ReplyOk(in, reply, error)) return false;
  size_t n = 0;
  in >> n;
  counts->assign(n, 0);
  for (int& c : *counts) in >> c;
  if (!in || n != paths.size()) {
    *error = "turnstile-zk-floor: bad reply \"" + reply.substr(0, 80) + "\"";
    return false;
  }
  return true;
}

}  // namespace turnstile::bench
