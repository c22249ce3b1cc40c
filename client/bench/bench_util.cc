// Statistics, the JSON writer, and ZooKeeper four-letter words over a socket.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "client/bench/bench_internal.h"

#include <dirent.h>

namespace turnstile::bench {

double ToMs(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

Latency Summarize(std::vector<double> samples) {
  Latency l;
  l.count = samples.size();
  if (samples.empty()) return l;
  std::sort(samples.begin(), samples.end());
  auto rank = [&](double p) {
    size_t k = static_cast<size_t>(std::ceil(p / 100.0 * samples.size()));
    if (k == 0) k = 1;
    return samples[std::min(k, samples.size()) - 1];
  };
  l.p50_ms = rank(50);
  l.p99_ms = rank(99);
  double sum = 0;
  for (double v : samples) sum += v;
  l.mean_ms = sum / samples.size();
  l.max_ms = samples.back();
  l.min_ms = samples.front();
  return l;
}

void CycleSamples::Merge(CycleSamples&& slice) {
  auto append = [](std::vector<double>* to, std::vector<double>* from) {
    to->insert(to->end(), from->begin(), from->end());
  };
  cycles += slice.cycles;
  seconds += slice.seconds;
  append(&cycle_ms, &slice.cycle_ms);
  append(&handoff_ms, &slice.handoff_ms);
  append(&handoff_signed_ms, &slice.handoff_signed_ms);
  append(&release_to_acquired_ms, &slice.release_to_acquired_ms);
  acquired_before_released += slice.acquired_before_released;
  errors += slice.errors;
  if (error.empty()) error = std::move(slice.error);
  slices += std::max(slice.slices, 1);
  if (slice.slice_rates.empty() && slice.seconds > 0) {
    slice.slice_rates.push_back(slice.cycles / slice.seconds);
  }
  append(&slice_rates, &slice.slice_rates);
}

CycleResult CycleSamples::Result() const {
  CycleResult r;
  r.cycles = cycles;
  r.seconds = seconds;
  r.per_second = seconds > 0 ? cycles / seconds : 0;
  r.cycle = Summarize(cycle_ms);
  r.handoff = Summarize(handoff_ms);
  r.handoff_signed = Summarize(handoff_signed_ms);
  r.release_to_acquired = Summarize(release_to_acquired_ms);
  r.acquired_before_released = acquired_before_released;
  r.errors = errors;
  r.error = error;
  return r;
}

void DrainSamples::AddLock(std::vector<Grant> grants) {
  if (grants.empty()) return;
  std::sort(grants.begin(), grants.end(),
            [](const Grant& a, const Grant& b) { return a.token < b.token; });
  Clock::time_point last_release = grants.front().released_at;
  for (size_t i = 1; i < grants.size(); ++i) {
    double ms = ToMs(grants[i].acquired_at - grants[i - 1].released_at);
    signed_.push_back(ms);
    if (ms < 0) ++acquired_before_released_;
    handoff_.push_back(ms < 0 ? 0 : ms);
    from_release_.push_back(ToMs(grants[i].acquired_at - grants[i - 1].release_sent_at));
    last_release = std::max(last_release, grants[i].released_at);
  }
  const Clock::time_point first_release = grants.front().released_at;
  busy_seconds_ += std::chrono::duration<double>(last_release - first_release).count();
  first_ = any_ ? std::min(first_, first_release) : first_release;
  last_ = any_ ? std::max(last_, last_release) : last_release;
  any_ = true;
}

void DrainSamples::Fill(bool at_once, HerdResult* r) const {
  r->handoffs = handoff_.size();
  r->handoff = Summarize(handoff_);
  r->handoff_signed = Summarize(signed_);
  r->release_to_acquired = Summarize(from_release_);
  r->acquired_before_released = acquired_before_released_;
  r->drain_seconds =
      at_once ? std::chrono::duration<double>(last_ - first_).count() : busy_seconds_;
  r->handoffs_per_second = r->drain_seconds > 0 ? r->handoffs / r->drain_seconds : 0;
}

// --- the replica process --------------------------------------------------------

int64_t ProcessRssBytes(int pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/status").c_str(), "r");
  if (f == nullptr) return -1;
  int64_t kib = -1;
  char line[256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    long long v = 0;
    if (std::sscanf(line, "VmRSS: %lld kB", &v) == 1) {
      kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

double ProcessCpuSeconds(int pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return -1;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // the fields are counted from the last ')'. utime and stime are fields 14
  // and 15, i.e. the 12th and 13th after it.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return -1;
  unsigned long long utime = 0, stime = 0;
  if (std::sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                  &stime) != 2) {
    return -1;
  }
  const long ticks = sysconf(_SC_CLK_TCK);
  return ticks > 0 ? static_cast<double>(utime + stime) / ticks : -1;
}

int64_t ProcessContextSwitches(int pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return -1;
  int64_t total = 0;
  while (struct dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::FILE* f = std::fopen((dir + "/" + e->d_name + "/status").c_str(), "r");
    if (f == nullptr) continue;  // the thread ended meanwhile
    char line[256];
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      long long v = 0;
      if (std::sscanf(line, "voluntary_ctxt_switches: %lld", &v) == 1 ||
          std::sscanf(line, "nonvoluntary_ctxt_switches: %lld", &v) == 1) {
        total += v;
      }
    }
    std::fclose(f);
  }
  closedir(d);
  return total;
}

UsageMeter::Snapshot UsageMeter::Take(int self_pid) const {
  Snapshot s;
  const int pids[3] = {o_.server_pid, self_pid > 0 ? self_pid : static_cast<int>(getpid()),
                       o_.zk_pid};
  for (int i = 0; i < 3; ++i) {
    if (pids[i] <= 0) continue;
    s.cpu[i] = ProcessCpuSeconds(pids[i]);
    s.switches[i] = ProcessContextSwitches(pids[i]);
  }
  return s;
}

void UsageMeter::Add(const Snapshot& a, const Snapshot& b, bool server, SideUsage* into) {
  SideUsage::Process* procs[3] = {server ? &into->server : nullptr, &into->self, &into->zk};
  for (int i = 0; i < 3; ++i) {
    SideUsage::Process* p = procs[i];
    if (p == nullptr) continue;
    if (a.cpu[i] < 0 || b.cpu[i] < 0 || a.switches[i] < 0 || b.switches[i] < 0) {
      p->known = false;
      continue;
    }
    p->cpu_s += b.cpu[i] - a.cpu[i];
    p->switches += b.switches[i] - a.switches[i];
  }
}

// --- four-letter words --------------------------------------------------------

namespace {

// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// "h1:p1,h2:p2/chroot" -> host and port of h1.
bool FirstServer(const std::string& connect, std::string* host, std::string* port) {
  std::string first = connect.substr(0, connect.find(','));
  first = first.substr(0, first.find('/'));
  if (first.empty()) return false;
  if (first[0] == '[') {  // [v6]:port
    size_t close_bracket = first.find(']');
    if (close_bracket == std::string::npos) return false;
    *host = first.substr(1, close_bracket - 1);
    *port = first.size() > close_bracket + 2 ? first.substr(close_bracket + 2) : "2181";
    return true;
  }
  size_t colon = first.rfind(':');
  *host = first.substr(0, colon);
  *port = colon == std::string::npos ? "2181" : first.substr(colon + 1);
  return !host->empty() && !port->empty();
}

}  // namespace

std::string FourLetterWord(const std::string& zk_connect, const std::string& cmd,
                           Millis timeout, std::string* error) {
  const Clock::time_point deadline = Clock::now() + timeout;
  std::string host, port;
  if (!FirstServer(zk_connect, &host, &port)) {
    *error = "cannot parse ZooKeeper address \"" + zk_connect + "\"";
    return "";
  }
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (gai != 0) {
    *error = "resolve " + host + ": " + gai_strerror(gai);
    return "";
  }
  std::string last_error = "no address for " + host;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd s;
    s.fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  ai->ai_protocol);
    if (s.fd < 0) {
      last_error = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    if (connect(s.fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_error = "connect " + host + ":" + port + ": " + std::strerror(errno);
      continue;
    }
    pollfd p{s.fd, POLLOUT, 0};
    if (poll(&p, 1, RemainingMs(deadline)) != 1) {
      last_error = "connect " + host + ":" + port + ": timed out";
      continue;
    }
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (soerr != 0) {
      last_error = "connect " + host + ":" + port + ": " + std::strerror(soerr);
      continue;
    }
    size_t sent = 0;
    while (sent < cmd.size()) {
      ssize_t n = send(s.fd, cmd.data() + sent, cmd.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        pollfd w{s.fd, POLLOUT, 0};
        if (poll(&w, 1, RemainingMs(deadline)) == 1) continue;
      }
      break;
    }
    if (sent < cmd.size()) {
      last_error = "send " + cmd + " to " + host + ":" + port + " failed";
      continue;
    }
    std::string reply;
    char buf[8192];
    for (;;) {
      pollfd r{s.fd, POLLIN, 0};
      int ready = poll(&r, 1, RemainingMs(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready != 1) {
        freeaddrinfo(res);
        *error = cmd + " to " + host + ":" + port + ": timed out";
        return "";
      }
      ssize_t n = recv(s.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        reply.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      break;  // EOF (the server closes after the reply) or an error
    }
    freeaddrinfo(res);
    return reply;
  }
  freeaddrinfo(res);
  *error = last_error;
  return "";
}

bool ReadMntr(const std::string& zk_connect, Mntr* out, std::string* error) {
  std::string reply = FourLetterWord(zk_connect, "mntr", Millis(5000), error);
  if (reply.empty()) {
    if (error->empty()) *error = "empty mntr reply";
    return false;
  }
  out->clear();
  size_t pos = 0;
  while (pos < reply.size()) {
    size_t eol = reply.find('\n', pos);
    if (eol == std::string::npos) eol = reply.size();
    std::string line = reply.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    (*out)[line.substr(0, tab)] = line.substr(tab + 1);
  }
  if (!out->count("zk_packets_received")) {
    *error = "unexpected mntr reply (is `mntr` in 4lw.commands.whitelist?): " +
             reply.substr(0, 200);
    return false;
  }
  return true;
}

double MntrValue(const Mntr& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return 0;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  return end == it->second.c_str() ? 0 : v;
}

bool ReadMntrWhen(const std::string& zk_connect, const std::string& key, double at_least,
                  std::chrono::steady_clock::time_point deadline, Mntr* out, std::string* error) {
  for (;;) {
    if (!ReadMntr(zk_connect, out, error)) return false;
    if (MntrValue(*out, key) >= at_least || std::chrono::steady_clock::now() >= deadline) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ZkCounters CounterDelta(const Mntr& before, const Mntr& after) {
  auto d = [&](const char* key) { return MntrValue(after, key) - MntrValue(before, key); };
  ZkCounters c;
  c.packets = d("zk_packets_received") + d("zk_packets_sent");
  c.deleted_watches = d("zk_sum_node_deleted_watch_count");
  c.changed_watches = d("zk_sum_node_changed_watch_count");
  c.notifications = c.deleted_watches + c.changed_watches;
  return c;
}

// --- JSON ---------------------------------------------------------------------

void Json::Key(const std::string& key) {
  if (!body_.empty()) body_ += ",";
  body_ += JsonQuote(key) + ":";
}

Json& Json::Str(const std::string& key, const std::string& value) {
  Key(key);
  body_ += JsonQuote(value);
  return *this;
}

Json& Json::Num(const std::string& key, double value) {
  Key(key);
  if (!std::isfinite(value)) {
    body_ += "null";
  } else {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6g", value);
    body_ += buf;
  }
  return *this;
}

Json& Json::Int(const std::string& key, int64_t value) {
  Key(key);
  body_ += std::to_string(value);
  return *this;
}

Json& Json::Obj(const std::string& key, const Json& value) {
  Key(key);
  body_ += value.Text();
  return *this;
}

Json& Json::Arr(const std::string& key, const std::vector<Json>& values) {
  Key(key);
  body_ += "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) body_ += ",";
    body_ += values[i].Text();
  }
  body_ += "]";
  return *this;
}

Json& Json::Null(const std::string& key) {
  Key(key);
  body_ += "null";
  return *this;
}

std::string Json::Text() const { return "{" + body_ + "}"; }

}  // namespace turnstile::bench
