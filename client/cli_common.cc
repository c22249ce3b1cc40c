#include "client/cli_common.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/json_quote.h"
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
  f->String("owner", &g->owner, "owner recorded on the lock (default user@host)");
  f->Duration("rpc-timeout", &g->timeout, "deadline for describe, list, release and health");
}

void PrintLine(const std::string& s) {
  std::fputs(s.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

int ReportError(const Globals& g, const absl::Status& s) {
  if (g.json()) {
    PrintLine(absl::StrCat("{\"error\":", JsonQuote(absl::StatusCodeToString(s.code())),
                           ",\"message\":", JsonQuote(std::string(s.message())), "}"));
  } else {
    std::fprintf(stderr, "turnstile: %s: %s\n", absl::StatusCodeToString(s.code()).c_str(),
                 std::string(s.message()).c_str());
  }
  if (s.code() == absl::StatusCode::kFailedPrecondition ||
      s.code() == absl::StatusCode::kDeadlineExceeded) {
    return kExitNotAcquired;
  }
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


ChildOutcome RunChild(StopSignals& stop, LockWatch& watch, const std::vector<std::string>& argv,
                      const std::vector<std::string>& env, Millis grace,
                      std::atomic<pid_t>* running, const std::string& what,
                      const std::function<void(pid_t)>& started) {
  ChildOutcome out;
  // The child: `env` over this process's environment, default signal mask.
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
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t child = -1;
  int rc = posix_spawnp(&child, cmd[0], nullptr, &attr, cmd.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    std::fprintf(stderr, "turnstile: cannot run %s: %s\n", cmd[0], std::strerror(rc));
    out.code = 127;
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
    // Forward Ctrl-C / SIGTERM to the command; a SIGHUP from us ends it.
    for (;;) {
      int sig = stop.Wait(std::nullopt);
      if (stopping.load()) return;
      kill(child, sig == SIGHUP ? SIGTERM : sig);
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
    std::fprintf(stderr, "turnstile: %s lost (%s); stopping the command\n", what.c_str(),
                 reason.c_str());
    kill(child, SIGTERM);
    std::unique_lock<std::mutex> l(mu);
    if (!cv.wait_for(l, grace, [&] { return exited; })) {
      kill(child, SIGKILL);
      cv.wait(l, [&] { return exited; });
    }
  }
  reaper.join();
  stopping = true;
  kill(getpid(), SIGHUP);
  forwarder.join();
  out.lost = lost;
  out.code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  return out;
}

}  // namespace turnstile::cli
