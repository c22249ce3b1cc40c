// A candidate for election_test's "never two leaders" run: campaigns with
// the C++ client's Election over and over, and while its on_leadership
// callback says it leads, writes its term to a fenced register (a file
// under flock that refuses a term lower than the last one written).
//
//   election_child TARGET NAME REGISTER_FILE
//
// Prints, with CLOCK_MONOTONIC nanoseconds (comparable across processes):
//   LEADER <term> <ns>            the callback said "leader"
//   NOT <term> <ns> <reason>      the callback said "not leader"
//   WRITE <term> <ns> ok|stale    a register write (stale: refused)
// The callback and the writes share one mutex, so every write a leader
// makes lies between its LEADER and NOT lines.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>

#include "client/lib/client.h"
#include "client/lib/coordination.h"

namespace {

int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::mutex mu;  // the callback and the writes
std::condition_variable cv;
bool leader = false;   // GUARDED_BY(mu) as the callback last said
bool ended = false;    // GUARDED_BY(mu) the leadership is over (campaign again)
uint64_t term = 0;     // GUARDED_BY(mu)

void Print(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// Writes `t` unless a higher term was written; true if written.
bool WriteRegister(const std::string& path, uint64_t t) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  flock(fd, LOCK_EX);
  char buf[32] = {0};
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  uint64_t last = n > 0 ? std::strtoull(buf, nullptr, 10) : 0;
  bool ok = t >= last;
  if (ok) {
    std::string s = std::to_string(t) + "\n";
    (void)ftruncate(fd, 0);
    (void)pwrite(fd, s.data(), s.size(), 0);
  }
  Print("WRITE " + std::to_string(t) + " " + std::to_string(MonoNs()) + (ok ? " ok" : " stale"));
  flock(fd, LOCK_UN);
  close(fd);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: election_child TARGET NAME REGISTER_FILE\n");
    return 2;
  }
  const std::string target = argv[1], name = argv[2], reg = argv[3];
  turnstile::client::ClientOptions co;
  co.target = target;
  co.default_owner = "candidate-" + std::to_string(getpid());
  auto client = turnstile::client::Client::Connect(co);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  turnstile::client::ElectionOptions eo;
  turnstile::client::Election* current = nullptr;
  eo.on_leadership = [&](bool is_leader, const std::string& reason) {
    std::lock_guard<std::mutex> l(mu);
    leader = is_leader;
    if (is_leader) {
      term = current->Term();
      Print("LEADER " + std::to_string(term) + " " + std::to_string(MonoNs()));
    } else {
      Print("NOT " + std::to_string(term) + " " + std::to_string(MonoNs()) + " " + reason);
      if (reason != "SUSPENDED") ended = true;
    }
    cv.notify_all();
  };
  for (;;) {
    turnstile::client::Election e(client->get(), name, eo);
    {
      std::lock_guard<std::mutex> l(mu);
      current = &e;
      ended = false;
    }
    absl::Status st = e.Campaign(std::to_string(getpid()), std::chrono::milliseconds::max());
    if (!st.ok()) {
      std::fprintf(stderr, "campaign: %s\n", st.ToString().c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a retry's pause
      continue;
    }
    for (;;) {
      std::unique_lock<std::mutex> l(mu);
      if (ended) break;
      if (leader) WriteRegister(reg, term);
      // Paces the writes; wakes at once when leadership changes.
      cv.wait_for(l, std::chrono::milliseconds(20));
    }
    // Leaving the scope resigns (a lost hold needs nothing more).
  }
}
