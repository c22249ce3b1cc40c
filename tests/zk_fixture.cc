#include "tests/zk_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "tests/wait.h"

namespace turnstile::testing {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kStartTimeout(60000);  // CI machines are slow.
constexpr milliseconds kStopTimeout(10000);
constexpr milliseconds kFourLetterWordTimeout(5000);
// Per-probe timeout while waiting for startup, so that one stuck connection
// cannot eat the whole start deadline.
constexpr milliseconds kProbeTimeout(2000);
constexpr int kMaxStartAttempts = 4;  // The first try plus 3 retries.

constexpr char kNotServing[] =
    "This ZooKeeper instance is not currently serving requests";

// Closes a file descriptor on scope exit.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Debian's Abseil has its own absl::string_view (not std::string_view).
absl::string_view AsAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

absl::Status ErrnoError(absl::string_view what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(err)));
}

int RemainingMs(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

sockaddr_in LoopbackAddress(int port) {
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

// Binds 127.0.0.1:port (0 = any free port) and returns the bound port.
// SO_REUSEADDR makes this agree with what the server (which sets it too)
// can bind, e.g. a port whose old connections linger in TIME_WAIT.
absl::StatusOr<int> BindLoopback(int port) {
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoError("socket", errno);
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = LoopbackAddress(port);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoError(absl::StrCat("bind 127.0.0.1:", port), errno);
  }
  socklen_t len = sizeof(addr);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return ErrnoError("getsockname", errno);
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

absl::StatusOr<std::string> MakeTempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  if (base == nullptr || *base == '\0') base = std::getenv("TMPDIR");
  if (base == nullptr || *base == '\0') base = "/tmp";
  std::error_code ec;
  // The server resolves paths in zoo.cfg itself; keep them absolute.
  std::string dir = std::filesystem::absolute(base, ec).string();
  if (ec) dir = base;
  std::string tmpl = dir + "/turnstile_zk.XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    return ErrnoError(absl::StrCat("mkdtemp ", tmpl), errno);
  }
  return tmpl;
}

bool IsExecutable(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

bool Exists(const char* path) { return access(path, R_OK) == 0; }

// Resolved in the parent: after fork() only async-signal-safe calls are
// allowed, so the child uses execv() with a ready absolute path.
absl::StatusOr<std::string> FindJava() {
  const char* java_home = std::getenv("JAVA_HOME");
  if (java_home != nullptr && *java_home != '\0') {
    std::string java = absl::StrCat(java_home, "/bin/java");
    if (IsExecutable(java)) return java;
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    std::string java = absl::StrCat(dir, "/java");
    if (IsExecutable(java)) return java;
  }
  return absl::NotFoundError(
      "no `java` in $JAVA_HOME/bin or $PATH; install openjdk and zookeeper");
}

std::string ClassPath() {
  const char* custom = std::getenv("ZOOKEEPER_CLASSPATH");
  if (custom != nullptr && *custom != '\0') return custom;
  // zookeeper.jar's manifest pulls in its dependencies. We name exactly one
  // slf4j binding: with `/usr/share/java/*` slf4j picks one of the several
  // installed bindings, typically slf4j-nop, and the log stays empty, which
  // hides the reason for a failed start (e.g. "Address already in use").
  if (Exists("/usr/share/java/slf4j-log4j12.jar") &&
      Exists("/usr/share/java/log4j-1.2.jar")) {
    return "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:"
           "/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar";
  }
  return "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:"
         "/usr/share/java/*";
}

std::string ReadFileFrom(const std::string& path, std::streamoff offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(offset);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::streamoff FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

std::string LastLines(absl::string_view text, int lines) {
  std::vector<absl::string_view> all = absl::StrSplit(text, '\n');
  if (!all.empty() && all.back().empty()) all.pop_back();
  size_t first =
      all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  return absl::StrJoin(all.begin() + first, all.end(), "\n");
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("wait status ", status);
}

// Parses the "key\n\tvalue\n\tvalue\n" layout of `wchc` and `wchp`.
absl::StatusOr<std::map<std::string, std::vector<std::string>>> ParseIndented(
    absl::string_view cmd, absl::string_view reply) {
  if (absl::StartsWith(reply, kNotServing)) {
    return absl::UnavailableError(absl::StrCat(cmd, ": ", reply));
  }
  std::map<std::string, std::vector<std::string>> result;
  std::vector<std::string>* current = nullptr;
  for (absl::string_view line : absl::StrSplit(reply, '\n')) {
    if (absl::EndsWith(line, "\r")) line.remove_suffix(1);
    if (line.empty())
      continue;  // Also the whole reply when nothing is watched.
    if (line[0] == '\t' || line[0] == ' ') {
      if (current == nullptr) {
        return absl::InternalError(
            absl::StrCat("unexpected `", cmd, "` output: ", reply));
      }
      current->emplace_back(absl::StripLeadingAsciiWhitespace(line));
    } else {
      current = &result[std::string(line)];
    }
  }
  return result;
}

}  // namespace

ZkServer::ZkServer(std::string dir, int port)
    : dir_(std::move(dir)), port_(port), owner_pid_(getpid()) {}

ZkServer::~ZkServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::Status s = StopLocked();
    if (!s.ok())
      std::fprintf(stderr, "ZkServer: stop failed: %s\n", s.ToString().c_str());
  }
  if (dir_.empty() || getpid() != owner_pid_) return;
  if (std::getenv("TURNSTILE_KEEP_ZK_DIR") != nullptr) {
    std::fprintf(stderr, "ZkServer: keeping %s\n", dir_.c_str());
    return;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

absl::StatusOr<std::unique_ptr<ZkServer>> ZkServer::Start() {
  absl::Status last_error;
  for (int attempt = 1; attempt <= kMaxStartAttempts; ++attempt) {
    // The port is free now, but someone may take it before the server binds
    // it; then the server exits and we retry with another one.
    absl::StatusOr<int> port = BindLoopback(0);
    if (!port.ok()) return port.status();
    absl::StatusOr<std::string> dir = MakeTempDir();
    if (!dir.ok()) return dir.status();
    std::unique_ptr<ZkServer> server(new ZkServer(*std::move(dir), *port));
    absl::Status s = server->WriteConfig();
    if (!s.ok()) return s;
    bool address_in_use = false;
    {
      std::lock_guard<std::mutex> lock(server->mu_);
      s = server->LaunchAndWait(&address_in_use);
    }
    if (s.ok()) return server;
    if (!address_in_use) return s;
    last_error = s;
  }
  return absl::UnavailableError(absl::StrCat(
      "ZooKeeper could not bind a free port in ", kMaxStartAttempts,
      " attempts; last error: ", last_error.message()));
}

std::string ZkServer::ConnectString() const {
  return absl::StrCat("127.0.0.1:", port_);
}

std::string ZkServer::LogPath() const { return dir_ + "/zk.log"; }

std::string ZkServer::LogTail(int lines) const {
  if (dir_.empty()) return "";
  return LastLines(ReadFileFrom(LogPath(), 0), lines);
}

absl::Status ZkServer::WriteConfig() const {
  const std::string data_dir = dir_ + "/data";
  if (mkdir(data_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError(absl::StrCat("mkdir ", data_dir), errno);
  }
  std::ofstream cfg(dir_ + "/zoo.cfg");
  // tickTime=500 allows session timeouts down to 1 s (2 ticks) so expiry
  // tests are fast; the max stays generous for slow machines.
  // forceSync=no: no fsync per transaction (slow CI disks); the data still
  // reaches the page cache, which is all a process restart needs.
  // preAllocSize (KB): do not preallocate 64 MB transaction logs.
  cfg << "tickTime=500\n"
      << "minSessionTimeout=1000\n"
      << "maxSessionTimeout=60000\n"
      << "initLimit=10\n"
      << "syncLimit=5\n"
      << "dataDir=" << data_dir << "\n"
      << "clientPort=" << port_ << "\n"
      << "clientPortAddress=127.0.0.1\n"
      << "admin.enableServer=false\n"
      << "4lw.commands.whitelist=*\n"
      << "maxClientCnxns=0\n"
      << "forceSync=no\n"
      << "preAllocSize=1024\n";
  cfg.close();
  if (!cfg)
    return absl::InternalError(absl::StrCat("cannot write ", dir_, "/zoo.cfg"));
  return absl::OkStatus();
}

absl::Status ZkServer::Launch() {
  absl::StatusOr<std::string> java = FindJava();
  if (!java.ok()) return java.status();
  std::vector<std::string> args = {
      *java,
      "-Xmx256m",
      // Startup speed matters more than throughput here, and the machine may
      // have 2 cores shared with compilers.
      "-XX:+UseSerialGC",
      "-XX:TieredStopAtLevel=1",
      "-XX:-UsePerfData",
      "-Djava.net.preferIPv4Stack=true",
      "-Dzookeeper.admin.enableServer=false",
      "-Dzookeeper.log.dir=" + dir_,
      "-Dzookeeper.root.logger=INFO,CONSOLE",
      "-Dzookeeper.jmx.log4j.disable=true",
      "-cp",
      ClassPath(),
      "org.apache.zookeeper.server.quorum.QuorumPeerMain",
      dir_ + "/zoo.cfg",
  };
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  {
    std::ofstream log(LogPath(), std::ios::app);
    log << "=== ZkServer: starting " << absl::StrJoin(args, " ") << "\n";
  }
  ScopedFd log_fd(
      open(LogPath().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (log_fd.get() < 0)
    return ErrnoError(absl::StrCat("open ", LogPath()), errno);
  ScopedFd null_fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null_fd.get() < 0) return ErrnoError("open /dev/null", errno);

  const pid_t parent = getpid();
  // PR_SET_PDEATHSIG fires when the forking *thread* exits, so it is only
  // safe from the main thread (whose exit ends the process). It kills the
  // server when the test binary crashes or is killed, where no cleanup runs.
  const bool main_thread = syscall(SYS_gettid) == parent;

  const pid_t pid = fork();
  if (pid < 0) return ErrnoError("fork", errno);
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    setpgid(0, 0);  // Own group: a Ctrl-C aimed at the tests does not reach it.
    if (main_thread) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // The parent died already.
    }
    // The JVM keeps ignored/blocked signals that way; SIGTERM must work.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD}) {
      sigaction(sig, &dfl, nullptr);
    }
    dup2(null_fd.get(), STDIN_FILENO);
    dup2(log_fd.get(), STDOUT_FILENO);
    dup2(log_fd.get(), STDERR_FILENO);
    // Do not leak the test's sockets (possibly listening ones) into the JVM.
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
#endif
    {
      for (int fd = 3; fd < 65536; ++fd) close(fd);
    }
    execv(argv[0], argv.data());
    static const char kMsg[] = "ZkServer: execv(java) failed\n";
    ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);  // Also in the parent, so it holds whoever runs first.
  pid_ = pid;
  return absl::OkStatus();
}

absl::Status ZkServer::LaunchAndWait(bool* address_in_use) {
  *address_in_use = false;
  const std::streamoff log_start = FileSize(LogPath());
  absl::Status s = Launch();
  if (!s.ok()) return s;

  const std::string our_data_dir = "dataDir=" + dir_ + "/data/";
  bool exited = false;
  bool serving = false;
  int wait_status = 0;
  const pid_t pid = pid_;
  WaitFor(
      [&] {
        pid_t r = waitpid(pid, &wait_status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD)) {
          exited = true;
          return true;
        }
        absl::StatusOr<std::string> ruok =
            FourLetterWordWithTimeout("ruok", kProbeTimeout);
        if (!ruok.ok() || *ruok != "imok") return false;
        // The port may have been taken by someone else's ZooKeeper between
        // picking it and our server binding it; make sure the answer is ours.
        absl::StatusOr<std::string> conf =
            FourLetterWordWithTimeout("conf", kProbeTimeout);
        serving = conf.ok() && conf->find(our_data_dir) != std::string::npos;
        return serving;
      },
      kStartTimeout, milliseconds(50));
  if (serving) return absl::OkStatus();

  if (exited) {
    pid_ = -1;
    const std::string log = ReadFileFrom(LogPath(), log_start);
    *address_in_use = log.find("Address already in use") != std::string::npos;
    return absl::UnavailableError(absl::StrCat(
        "ZooKeeper (pid ", pid, ") exited with ",
        DescribeWaitStatus(wait_status), " before serving on ", ConnectString(),
        "; last lines of ", LogPath(), ":\n", LastLines(log, 40)));
  }
  absl::Status stop = StopLocked();
  return absl::DeadlineExceededError(absl::StrCat(
      "ZooKeeper (pid ", pid, ") did not answer ruok on ", ConnectString(),
      " within ", kStartTimeout.count() / 1000, " s",
      stop.ok()
          ? ""
          : absl::StrCat(" (and stopping it failed: ", stop.message(), ")"),
      "; last lines of ", LogPath(), ":\n",
      LastLines(ReadFileFrom(LogPath(), log_start), 40)));
}

bool ZkServer::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (pid_ < 0) return false;
  if (getpid() != owner_pid_) return kill(pid_, 0) == 0;
  int status;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    pid_ = -1;  // Died on its own; reaped now.
    return false;
  }
  return true;
}

absl::Status ZkServer::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  return StopLocked();
}

absl::Status ZkServer::StopLocked() {
  if (pid_ < 0) return absl::OkStatus();
  const pid_t pid = pid_;
  if (getpid() != owner_pid_) {
    // A forked child (e.g. a gtest death test) must leave the parent's
    // server alone; it cannot reap it anyway.
    pid_ = -1;
    return absl::OkStatus();
  }
  auto reaped = [pid] {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    return r == pid || (r < 0 && errno == ECHILD);
  };
  if (kill(pid, SIGTERM) != 0 && errno != ESRCH) {
    return ErrnoError(absl::StrCat("kill(", pid, ", SIGTERM)"), errno);
  }
  if (!WaitFor(reaped, kStopTimeout)) {
    std::fprintf(stderr,
                 "ZkServer: pid %d ignored SIGTERM for %lld s; SIGKILL\n",
                 static_cast<int>(pid),
                 static_cast<long long>(kStopTimeout.count() / 1000));
    kill(pid, SIGKILL);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
  return absl::OkStatus();
}

absl::Status ZkServer::Restart() {
  if (dir_.empty()) {
    return absl::FailedPreconditionError(
        "ZkServer placeholder: no server to restart");
  }
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status s = StopLocked();
  if (!s.ok()) return s;
  for (int attempt = 1; attempt <= kMaxStartAttempts; ++attempt) {
    bool address_in_use = false;
    s = LaunchAndWait(&address_in_use);
    if (s.ok() || !address_in_use) return s;
    // Clients keep the port number, so we cannot move. Wait until whoever
    // holds it (a lingering connection, someone's ephemeral port) lets go.
    WaitFor([this] { return BindLoopback(port_).ok(); }, milliseconds(10000),
            milliseconds(50));
  }
  return absl::UnavailableError(
      absl::StrCat("ZooKeeper could not re-bind ", ConnectString(), " in ",
                   kMaxStartAttempts, " attempts; last error: ", s.message()));
}

absl::StatusOr<std::string> ZkServer::FourLetterWord(
    std::string_view cmd) const {
  return FourLetterWordWithTimeout(cmd, kFourLetterWordTimeout);
}

absl::StatusOr<std::string> ZkServer::FourLetterWordWithTimeout(
    std::string_view cmd, milliseconds timeout) const {
  if (cmd.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "four-letter word must have 4 letters: \"", AsAbsl(cmd), "\""));
  }
  if (port_ <= 0) {
    return absl::FailedPreconditionError("ZkServer placeholder: no server");
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string where = absl::StrCat(AsAbsl(cmd), " to ", ConnectString());

  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return ErrnoError("socket", errno);
  sockaddr_in addr = LoopbackAddress(port_);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(
          absl::StrCat(where, ": connect: ", std::strerror(errno)));
    }
    pollfd p = {fd.get(), POLLOUT, 0};
    int n;
    while ((n = poll(&p, 1, RemainingMs(deadline))) < 0 && errno == EINTR) {
    }
    if (n == 0)
      return absl::DeadlineExceededError(
          absl::StrCat(where, ": connect timed out"));
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (n < 0 || err != 0) {
      return absl::UnavailableError(absl::StrCat(
          where, ": connect: ", std::strerror(n < 0 ? errno : err)));
    }
  }
  // 4 bytes always fit in an empty socket buffer.
  if (send(fd.get(), cmd.data(), cmd.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(cmd.size())) {
    return absl::UnavailableError(
        absl::StrCat(where, ": send: ", std::strerror(errno)));
  }
  // The server writes the reply and closes the connection.
  std::string reply;
  char buf[4096];
  for (;;) {
    ssize_t r = recv(fd.get(), buf, sizeof(buf), 0);
    if (r > 0) {
      reply.append(buf, static_cast<size_t>(r));
      continue;
    }
    if (r == 0) return reply;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(
          absl::StrCat(where, ": recv: ", std::strerror(errno)));
    }
    pollfd p = {fd.get(), POLLIN, 0};
    int n = poll(&p, 1, RemainingMs(deadline));
    if (n == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(where, ": no EOF within ", timeout.count(),
                       " ms; got \"", reply, "\""));
    }
    if (n < 0 && errno != EINTR) return ErrnoError("poll", errno);
  }
}

absl::StatusOr<std::map<std::string, std::string>> ZkServer::Mntr() const {
  absl::StatusOr<std::string> reply = FourLetterWord("mntr");
  if (!reply.ok()) return reply.status();
  std::map<std::string, std::string> result;
  for (absl::string_view line : absl::StrSplit(*reply, '\n')) {
    if (absl::EndsWith(line, "\r")) line.remove_suffix(1);
    size_t tab = line.find('\t');
    if (tab == absl::string_view::npos) continue;
    result[std::string(line.substr(0, tab))] =
        std::string(line.substr(tab + 1));
  }
  if (result.empty()) {
    // E.g. "This ZooKeeper instance is not currently serving requests".
    return absl::UnavailableError(
        absl::StrCat("mntr: unexpected reply: ", *reply));
  }
  return result;
}

absl::StatusOr<std::map<std::string, std::vector<std::string>>>
ZkServer::WatchesBySession() const {
  absl::StatusOr<std::string> reply = FourLetterWord("wchc");
  if (!reply.ok()) return reply.status();
  return ParseIndented("wchc", *reply);
}

absl::StatusOr<std::map<std::string, std::vector<std::string>>>
ZkServer::WatchesByPath() const {
  absl::StatusOr<std::string> reply = FourLetterWord("wchp");
  if (!reply.ok()) return reply.status();
  return ParseIndented("wchp", *reply);
}

int FreeLoopbackPort() {
  absl::StatusOr<int> port = BindLoopback(0);
  return port.ok() ? *port : 0;
}

// ---------------------------------------------------------------------------
// The shared server.

namespace {

std::mutex g_shared_mu;
ZkServer* g_shared = nullptr;            // Guarded by g_shared_mu.
absl::Status* g_shared_error = nullptr;  // Guarded by g_shared_mu; leaked.

void StopSharedServer() {
  ZkServer* server;
  {
    std::lock_guard<std::mutex> lock(g_shared_mu);
    server = g_shared;
    g_shared = nullptr;
  }
  delete server;  // Stops it and removes its directory.
}

// TearDown runs after all tests, whether they passed or not. The atexit()
// hook covers programs that exit without finishing RUN_ALL_TESTS(); crashes
// are covered by PR_SET_PDEATHSIG in the child.
class SharedZkServerEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { StopSharedServer(); }
};

[[maybe_unused]] ::testing::Environment* const g_shared_env =
    ::testing::AddGlobalTestEnvironment(new SharedZkServerEnvironment);

}  // namespace

ZkServer& SharedZkServer() {
  std::lock_guard<std::mutex> lock(g_shared_mu);
  if (g_shared != nullptr) return *g_shared;
  if (g_shared_error == nullptr) {
    absl::StatusOr<std::unique_ptr<ZkServer>> server = ZkServer::Start();
    if (server.ok()) {
      g_shared = server->release();
      static const bool registered = (std::atexit(StopSharedServer), true);
      (void)registered;
      return *g_shared;
    }
    // Remember the failure: every test retrying a 60 s start helps nobody.
    g_shared_error = new absl::Status(server.status());
  }
  ADD_FAILURE() << "SharedZkServer(): could not start ZooKeeper: "
                << *g_shared_error;
  static ZkServer* const placeholder = new ZkServer("", 0);
  return *placeholder;
}

}  // namespace turnstile::testing
