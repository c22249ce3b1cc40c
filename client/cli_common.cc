#include "client/cli_common.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/json_quote.h"
#include "client/lib/coordination.h"
#include "client/lib/tls.h"

extern char** environ;

namespace turnstile::cli {

using turnstile::JsonQuote;

void RegisterGlobals(FlagSet* f, Globals* g) {
  f->String("server", &g->server, "turnstiled address (host:port or a gRPC target)");
  f->String("tls-ca-file", &g->tls_ca_file, "PEM CA certificates: use TLS to the server");
  f->String("tls-cert-file", &g->tls_cert_file,
            "PEM client certificate (with --tls-key-file): mutual TLS; the server knows you by it");
  f->String("tls-key-file", &g->tls_key_file, "PEM private key of --tls-cert-file");
  f->String("output", &g->output, "text or json (one JSON object per line)");
  f->String("owner", &g->owner, "owner recorded on the lock (empty: user@host/pid)");
  f->Duration("rpc-timeout", &g->timeout,
              "deadline for describe, check, list, release, revoke and health");
}

void PrintLine(const std::string& s) {
  std::fputs(s.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// A replica's refusal of a wait_timeout ends with the same in milliseconds,
// in brackets, for client libraries (protos/README.md); a person reads the
// part before it. JSON output keeps the whole message.
static std::string ForPeople(absl::string_view message) {
  const size_t at = message.rfind(" [wait_timeout is ");
  if (at != absl::string_view::npos && absl::EndsWith(message, "ms]")) {
    return std::string(message.substr(0, at));
  }
  return std::string(message);
}

int ReportError(const Globals& g, const absl::Status& s) {
  if (g.json()) {
    PrintLine(absl::StrCat("{\"error\":", JsonQuote(absl::StatusCodeToString(s.code())),
                           ",\"message\":", JsonQuote(std::string(s.message())), "}"));
  } else {
    std::fprintf(stderr, "turnstile: %s: %s\n", absl::StatusCodeToString(s.code()).c_str(),
                 ForPeople(s.message()).c_str());
  }
  if (s.code() == absl::StatusCode::kFailedPrecondition ||
      s.code() == absl::StatusCode::kDeadlineExceeded) {
    return kExitNotAcquired;
  }
  // Bad input, found here or by the server (which checks it before its
  // policy, so the answer is the same whoever asks), is a usage error.
  if (s.code() == absl::StatusCode::kInvalidArgument) return kExitUsage;
  return kExitError;
}

std::string DefaultOwner() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  const char* user = std::getenv("USER");
  return absl::StrCat(user ? user : "user", "@", host, "/", getpid());
}

absl::StatusOr<std::unique_ptr<Client>> Connect(const Globals& g) {
  turnstile::client::ClientOptions o;
  o.target = g.server;
  o.tls_ca_file = g.tls_ca_file;
  o.tls_cert_file = g.tls_cert_file;
  o.tls_key_file = g.tls_key_file;
  o.default_owner = g.owner.empty() ? DefaultOwner() : g.owner;
  return Client::Connect(o);
}

// A TLS file that cannot be used ends the command (never a fallback to
// plaintext).
std::shared_ptr<grpc::Channel> Channel(const Globals& g) {
  auto creds = turnstile::client::MakeChannelCredentials(
      {g.tls_ca_file, g.tls_cert_file, g.tls_key_file});
  if (!creds.ok()) {
    std::fprintf(stderr, "turnstile: %s\n", std::string(creds.status().message()).c_str());
    std::exit(kExitError);
  }
  return grpc::CreateChannel(g.server, *creds);
}

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

std::string StatusJson(const std::string& event, const LockStatus& s) {
  std::string out = absl::StrCat("{\"event\":", JsonQuote(event), ",\"state\":",
                                 JsonQuote(turnstile::client::LockStateName(s.state)));
  if (!s.lost_reason.empty()) absl::StrAppend(&out, ",\"reason\":", JsonQuote(s.lost_reason));
  if (!s.message.empty()) absl::StrAppend(&out, ",\"message\":", JsonQuote(s.message));
  return out + "}";
}


// ---- Stop signals ----

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  thread_ = std::thread([this] { Run(); });
}

StopSignals::~StopSignals() {
  {
    std::lock_guard<std::mutex> l(mu_);
    quit_ = true;
  }
  pthread_kill(thread_.native_handle(), SIGHUP);  // its sigwait returns
  thread_.join();
}

void StopSignals::Run() {
  for (;;) {
    int sig = 0;
    if (sigwait(&set_, &sig) != 0) continue;
    bool abandon = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (quit_) return;
      switch (phase_) {
        case Phase::kExit:
          _exit(128 + sig);
        case Phase::kWaiting:
          if (abandoned_ == 0) {
            abandoned_ = sig;
            abandon = true;
          }
          break;
        case Phase::kHolding:
          queue_.push_back(sig);
          cv_.notify_all();
          break;
      }
    }
    // Outside mu_: a waiting Acquire returns CANCELLED, and the thread
    // that called it then reads abandoned_ in EndWait.
    if (abandon) turnstile::client::AbandonWaits();
  }
}

void StopSignals::BeginWait() {
  std::lock_guard<std::mutex> l(mu_);
  if (phase_ == Phase::kExit) phase_ = Phase::kWaiting;
}

int StopSignals::EndWait(const std::function<void()>& start) {
  std::lock_guard<std::mutex> l(mu_);
  if (abandoned_ != 0) return abandoned_;
  if (start) start();
  phase_ = Phase::kHolding;
  return 0;
}

int StopSignals::Abandoned() {
  std::lock_guard<std::mutex> l(mu_);
  return abandoned_;
}

int StopSignals::Wait(std::optional<Millis> timeout) {
  std::unique_lock<std::mutex> l(mu_);
  auto ready = [&] { return !queue_.empty() || woken_; };
  if (timeout) {
    cv_.wait_for(l, *timeout, ready);
  } else {
    cv_.wait(l, ready);
  }
  if (!queue_.empty()) {
    const int sig = queue_.front();
    queue_.pop_front();
    return sig;
  }
  woken_ = false;
  return 0;
}

void StopSignals::Wake() {
  std::lock_guard<std::mutex> l(mu_);
  woken_ = true;
  cv_.notify_all();
}

std::string SignalName(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return absl::StrCat("signal ", sig);
  }
}

int ReportAbandoned(const Globals& g, int sig, const std::string& what) {
  if (g.json()) {
    PrintLine(absl::StrCat("{\"event\":\"abandoned\",\"signal\":", JsonQuote(SignalName(sig)), "}"));
  } else {
    std::fprintf(stderr, "turnstile: %s: stopped waiting for %s; nothing is held\n",
                 SignalName(sig).c_str(), what.c_str());
  }
  return 128 + sig;
}

// ---- Help ----

std::string FlagLines(const FlagSet& f) {
  // "Usage: P [flags]\n\nFlags (...):\n  --name ..."
  const std::string u = f.Usage();
  const size_t header = u.find("\nFlags (");
  if (header == std::string::npos) return "";
  const size_t body = u.find('\n', header + 1);
  return body == std::string::npos ? "" : u.substr(body + 1);
}

std::string CommandHelp(const std::string& usage, const std::string& about, const FlagSet* own) {
  std::string out = absl::StrCat("Usage: ", usage, "\n\n", about);
  if (!out.empty() && out.back() != '\n') out += '\n';
  const std::string lines = own ? FlagLines(*own) : std::string();
  if (lines.empty()) {
    out += "\nFlags: none of its own.\n";
  } else {
    absl::StrAppend(&out, "\nFlags (each also read from its environment variable; flags win):\n",
                    lines);
  }
  Globals defaults;
  FlagSet globals("turnstile");
  RegisterGlobals(&globals, &defaults);
  absl::StrAppend(&out, "\nGlobal flags (before the command; each also read from its "
                        "environment variable):\n", FlagLines(globals));
  return out;
}

// ---- Running a command ----

namespace {

// argv[0] as execvp would find it: with a '/', itself; otherwise the first
// executable regular file of that name in PATH (unset: /bin:/usr/bin).
// Empty, and *err set (ENOENT, EACCES), when there is none.
std::string FindProgram(const std::string& name, int* err) {
  if (name.find('/') != std::string::npos) return name;
  const char* env = std::getenv("PATH");
  const std::string path = env ? env : "/bin:/usr/bin";
  *err = ENOENT;
  size_t from = 0;
  for (;;) {
    const size_t colon = path.find(':', from);
    std::string dir = path.substr(from, colon == std::string::npos ? std::string::npos : colon - from);
    if (dir.empty()) dir = ".";
    const std::string file = dir + "/" + name;
    struct stat st;
    if (stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (access(file.c_str(), X_OK) == 0) return file;
      *err = EACCES;
    }
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  return "";
}

}  // namespace

ChildOutcome RunChild(StopSignals& stop, LockWatch& watch, const std::vector<std::string>& argv,
                      const std::vector<std::string>& env, Millis grace,
                      std::atomic<pid_t>* running, const std::string& what,
                      const std::function<void(pid_t)>& started) {
  ChildOutcome out;
  // Everything the child needs is made here: after fork it may only make
  // async-signal-safe calls (this process has other threads).
  std::vector<std::string> env_strings = env;
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    bool replaced = false;
    for (const auto& s : env_strings) {
      const size_t eq = s.find('=');
      replaced = replaced || kv.compare(0, eq + 1, s, 0, eq + 1) == 0;
    }
    if (!replaced) envp.push_back(*e);
  }
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cmd;
  for (auto& a : args) cmd.push_back(a.data());
  cmd.push_back(nullptr);
  int find_err = 0;
  std::string program = FindProgram(args[0], &find_err);
  // A file without "#!" that execve refuses (ENOEXEC) runs under /bin/sh,
  // as execvp does.
  std::string sh = "/bin/sh";
  std::vector<char*> sh_cmd = {sh.data(), program.data()};
  for (size_t i = 1; i < args.size(); ++i) sh_cmd.push_back(args[i].data());
  sh_cmd.push_back(nullptr);

  pid_t child = -1;
  int spawn_err = program.empty() ? find_err : 0;
  const int abandoned = stop.EndWait([&] {
    if (spawn_err != 0) return;
    int fds[2];  // the child writes errno here if it cannot exec
    if (pipe2(fds, O_CLOEXEC) != 0) {
      spawn_err = errno;
      return;
    }
    const pid_t parent = getpid();
    sigset_t empty;
    sigemptyset(&empty);
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    // _Fork (glibc 2.34): no atfork handlers (gRPC's among them) run in a
    // process with live streams; the child makes async-signal-safe calls only.
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    child = _Fork();
#else
    child = fork();
#endif
    if (child == 0) {
      // The child: async-signal-safe calls only. Killed with this process
      // (a parent-death signal; if the parent is gone already, now).
      close(fds[0]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(128 + SIGKILL);
      sigaction(SIGPIPE, &dfl, nullptr);
      pthread_sigmask(SIG_SETMASK, &empty, nullptr);
      execve(program.c_str(), cmd.data(), envp.data());
      int e = errno;
      if (e == ENOEXEC) {
        execve(sh.c_str(), sh_cmd.data(), envp.data());
        e = errno;
      }
      (void)!write(fds[1], &e, sizeof(e));
      _exit(kExitCannotRun);
    }
    close(fds[1]);
    if (child < 0) {
      spawn_err = errno;
      close(fds[0]);
      return;
    }
    int e = 0;
    ssize_t n;
    while ((n = read(fds[0], &e, sizeof(e))) < 0 && errno == EINTR) {
    }
    close(fds[0]);
    if (n == static_cast<ssize_t>(sizeof(e))) {  // exec failed; the child exits 127
      spawn_err = e;
      while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
      }
      child = -1;
    }
  });
  if (abandoned != 0) {
    out.abandoned = abandoned;
    return out;
  }
  if (spawn_err != 0) {
    std::fprintf(stderr, "turnstile: cannot run %s: %s\n", args[0].c_str(),
                 std::strerror(spawn_err));
    out.code = kExitCannotRun;
    return out;
  }
  out.started = true;
  running->store(child);
  if (started) started(child);

  // One thread reaps the child; this thread reacts to loss and signals.
  std::mutex mu;
  std::condition_variable cv;
  bool exited = false;
  int wstatus = 0;
  std::thread reaper([&] {
    int st = 0;
    while (waitpid(child, &st, 0) < 0 && errno == EINTR) {
    }
    {
      std::lock_guard<std::mutex> l(mu);
      exited = true;
      wstatus = st;
    }
    cv.notify_all();
    // Never hold mu while taking watch.mu: the waiter below nests them the
    // other way round.
    std::lock_guard<std::mutex> wl(watch.mu);
    watch.cv.notify_all();
  });
  std::atomic<bool> stopping{false};
  std::thread forwarder([&] {
    // Forward Ctrl-C / SIGTERM to the command; SIGHUP as SIGTERM.
    for (;;) {
      const int sig = stop.Wait(std::nullopt);
      if (stopping.load()) return;
      if (sig != 0) kill(child, sig == SIGHUP ? SIGTERM : sig);
    }
  });
  bool lost = false;
  {
    std::unique_lock<std::mutex> wl(watch.mu);
    watch.cv.wait(wl, [&] {
      std::lock_guard<std::mutex> l(mu);
      return exited || watch.lost;
    });
    lost = watch.lost;
  }
  bool was_exited;
  {
    std::lock_guard<std::mutex> l(mu);
    was_exited = exited;
  }
  if (lost && !was_exited) {
    std::string reason;
    {
      std::lock_guard<std::mutex> wl(watch.mu);
      reason = watch.last ? watch.last->lost_reason : "?";
    }
    if (reason == "REVOKED") {
      std::fprintf(stderr, "turnstile: asked to give up %s; stopping the command\n", what.c_str());
    } else {
      std::fprintf(stderr, "turnstile: %s lost (%s); stopping the command\n", what.c_str(),
                   reason.c_str());
    }
    kill(child, SIGTERM);
    std::unique_lock<std::mutex> l(mu);
    if (!cv.wait_for(l, grace, [&] { return exited; })) {
      kill(child, SIGKILL);
      cv.wait(l, [&] { return exited; });
    }
  }
  reaper.join();
  stopping = true;
  stop.Wake();
  forwarder.join();
  out.lost = lost;
  out.code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  return out;
}

}  // namespace turnstile::cli
