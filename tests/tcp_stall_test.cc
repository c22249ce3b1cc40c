// TcpStallWatch (server/zk/tcp_stall.h), the loop's watch on its ZooKeeper
// connection: its reading of TCP_INFO alone (Classify, at and around every
// boundary), then Look over real loopback sockets in each state it tells
// apart. A SYN that is never answered is a connect to a listener whose
// accept queue is full (Linux drops the SYN); a connection stalled in TCP's
// backoff is one whose peer stops reading (zero window: the probe timer
// backs off); a server that answers is a listener with room. Look is given
// the time (`now`), so patience and probe cadence are tested without
// waiting them out; what is waited for (a handshake, a backoff) is waited
// for as an event, with a deadline. No root, no packet filter.
#include "server/zk/tcp_stall.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/wait.h"

namespace turnstile {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using Clock = TcpStallWatch::Clock;
using TcpWait = TcpStallWatch::TcpWait;
using Verdict = TcpStallWatch::Verdict;
constexpr milliseconds kWithin{20000};  // for the kernel to do its part

// ---- Classify: TCP_INFO read alone -----------------------------------------

TEST(TcpStallClassify, UnansweredSynIsProbedFromProbeEveryAndGivenUpAtConnectPatience) {
  const nanoseconds tick{1};
  for (int backoff : {0, 1, 2, 7}) {  // a SYN's backoff does not count
    SCOPED_TRACE(backoff);
    EXPECT_EQ(TcpStallWatch::Classify(TCP_SYN_SENT, backoff, nanoseconds(0)), TcpWait::kNotWaiting);
    EXPECT_EQ(TcpStallWatch::Classify(TCP_SYN_SENT, backoff, TcpStallWatch::kProbeEvery - tick),
              TcpWait::kNotWaiting);
    EXPECT_EQ(TcpStallWatch::Classify(TCP_SYN_SENT, backoff, TcpStallWatch::kProbeEvery),
              TcpWait::kWaiting);
    EXPECT_EQ(TcpStallWatch::Classify(TCP_SYN_SENT, backoff, TcpStallWatch::kConnectPatience - tick),
              TcpWait::kWaiting);
    EXPECT_EQ(TcpStallWatch::Classify(TCP_SYN_SENT, backoff, TcpStallWatch::kConnectPatience),
              TcpWait::kGiveUp);
    EXPECT_EQ(TcpStallWatch::Classify(TCP_SYN_SENT, backoff, std::chrono::hours(1)),
              TcpWait::kGiveUp);
  }
}

TEST(TcpStallClassify, EstablishedWaitsOnTcpFromTheSecondBackoffAndIsNeverGivenUp) {
  for (auto age : {nanoseconds(0), nanoseconds(TcpStallWatch::kConnectPatience),
                   nanoseconds(std::chrono::hours(1))}) {
    SCOPED_TRACE(age.count());
    EXPECT_EQ(TcpStallWatch::Classify(TCP_ESTABLISHED, 0, age), TcpWait::kNotWaiting);
    EXPECT_EQ(TcpStallWatch::Classify(TCP_ESTABLISHED, 1, age), TcpWait::kNotWaiting);
    EXPECT_EQ(TcpStallWatch::Classify(TCP_ESTABLISHED, 2, age), TcpWait::kWaiting);
    EXPECT_EQ(TcpStallWatch::Classify(TCP_ESTABLISHED, 3, age), TcpWait::kWaiting);
    EXPECT_EQ(TcpStallWatch::Classify(TCP_ESTABLISHED, 255, age), TcpWait::kWaiting);
  }
}

TEST(TcpStallClassify, OtherStatesAreLeftToTheConnectionsOwner) {
  for (int state : {TCP_SYN_RECV, TCP_FIN_WAIT1, TCP_FIN_WAIT2, TCP_TIME_WAIT, TCP_CLOSE,
                    TCP_CLOSE_WAIT, TCP_LAST_ACK, TCP_LISTEN, TCP_CLOSING}) {
    SCOPED_TRACE(state);
    for (int backoff : {0, 2, 9}) {
      EXPECT_EQ(TcpStallWatch::Classify(state, backoff, std::chrono::hours(1)),
                TcpWait::kNotWaiting);
    }
  }
}

// ---- Look over real loopback sockets ---------------------------------------

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

int LocalPort(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0) << std::strerror(errno);
  return ntohs(a.sin_port);
}

// Descriptors open in this process (a probe is one).
int OpenFds() {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  EXPECT_NE(dir, nullptr) << std::strerror(errno);
  if (dir == nullptr) return -1;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n;
}

std::string Address(int port) { return "127.0.0.1:" + std::to_string(port); }

tcp_info Info(int fd) {
  tcp_info ti{};
  socklen_t len = sizeof(ti);
  EXPECT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0) << std::strerror(errno);
  return ti;
}

// A socket bound to a loopback port; listening with `backlog` unless -1
// (then a connect to its port is refused: the port is held, nobody listens).
// `rcvbuf` > 0: the receive buffer of the connections it accepts.
Fd BoundSocket(int backlog, int rcvbuf = 0) {
  Fd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_GE(s.get(), 0) << std::strerror(errno);
  if (rcvbuf > 0) setsockopt(s.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in a = Loopback(0);
  EXPECT_EQ(bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
  if (backlog >= 0) EXPECT_EQ(listen(s.get(), backlog), 0) << std::strerror(errno);
  return s;
}

// A non-blocking connect under way to `port` (as the C client makes it).
Fd StartConnect(int port, int sndbuf = 0) {
  Fd c(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  EXPECT_GE(c.get(), 0) << std::strerror(errno);
  if (sndbuf > 0) setsockopt(c.get(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  sockaddr_in a = Loopback(port);
  const int rc = connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
  EXPECT_TRUE(rc == 0 || errno == EINPROGRESS) << std::strerror(errno);
  return c;
}

// Whether `fd` becomes ready for `events` within kWithin.
bool Ready(int fd, short events) {
  pollfd p = {fd, events, 0};
  return poll(&p, 1, static_cast<int>(kWithin.count())) == 1 && (p.revents & events) != 0;
}

// A listener that answers no SYN: its accept queue (backlog 0) holds one
// connection nobody accepts, so the kernel drops every further SYN.
struct FullListener {
  Fd listener = BoundSocket(0);
  int port = LocalPort(listener.get());
  Fd queued = StartConnect(port);
  FullListener() {
    EXPECT_TRUE(Ready(listener.get(), POLLIN)) << "the first connection never queued";
  }
};

// A connection whose SYN is never answered.
Fd UnansweredConnect(const FullListener& full) {
  Fd c = StartConnect(full.port);
  EXPECT_EQ(Info(c.get()).tcpi_state, TCP_SYN_SENT) << "the listener answered: queue not full";
  return c;
}

// The watch under test, probing `server`; counts the probes it starts.
struct Watch {
  explicit Watch(std::string server)
      : watch([this, server] {
          ++probes;
          return server;
        }) {}
  int probes = 0;
  TcpStallWatch watch;
};

// Calls Look whenever it asks to be called again, as the session's loop
// does, from `t0` until it answers other than kKeep or `until` (from t0)
// is reached.
struct Looks {
  Verdict last;
  std::vector<int64_t> at_ms;     // when it looked, from t0
  std::vector<int64_t> probe_ms;  // when a probe started, from t0
};
Looks FollowLooks(Watch& w, int fd, bool pending, int in_flight, Clock::time_point t0,
                  milliseconds until) {
  Looks looks;
  for (milliseconds at{0}; at <= until; at += milliseconds(looks.last.look_ms)) {
    const int probes = w.probes;
    looks.last = w.watch.Look(fd, pending, in_flight, t0 + at);
    looks.at_ms.push_back(at.count());
    if (w.probes != probes) looks.probe_ms.push_back(at.count());
    if (looks.last.action != Verdict::kKeep || looks.last.look_ms <= 0) break;
  }
  return looks;
}

// first, first + step, first + 2 * step... up to `last`.
std::vector<int64_t> Every(int64_t first, int64_t step, int64_t last) {
  std::vector<int64_t> out;
  for (int64_t t = first; t <= last; t += step) out.push_back(t);
  return out;
}

TEST(TcpStallLook, NoSocketIsNothingToWatch) {
  Watch w(Address(1));
  const Verdict v = w.watch.Look(-1, true, 3, Clock::now());
  EXPECT_EQ(v.action, Verdict::kKeep);
  EXPECT_EQ(v.look_ms, -1);
  EXPECT_EQ(w.probes, 0);
}

TEST(TcpStallLook, HealthyConnectionIsKeptAndLookedAtEveryLookEveryOnlyWhileARequestIsOut) {
  Fd listener = BoundSocket(8);
  const int port = LocalPort(listener.get());
  Fd client = StartConnect(port);
  ASSERT_TRUE(Ready(client.get(), POLLOUT));
  Fd server(accept(listener.get(), nullptr, nullptr));
  ASSERT_GE(server.get(), 0) << std::strerror(errno);
  ASSERT_EQ(Info(client.get()).tcpi_state, TCP_ESTABLISHED);
  Watch w(Address(port));
  const Clock::time_point t0 = Clock::now();

  // Idle (no request, no connect pending): nothing to look at.
  Verdict v = w.watch.Look(client.get(), false, 0, t0);
  EXPECT_EQ(v.action, Verdict::kKeep);
  EXPECT_EQ(v.look_ms, -1);

  // A request out, its bytes acknowledged: waiting on ZooKeeper, not TCP.
  ASSERT_EQ(write(client.get(), "x", 1), 1);
  ASSERT_TRUE(testing::WaitFor([&] { return Info(client.get()).tcpi_unacked == 0; }, kWithin));
  v = w.watch.Look(client.get(), false, 1, t0);
  EXPECT_EQ(v.action, Verdict::kKeep);
  EXPECT_EQ(v.look_ms, TcpStallWatch::kLookEvery.count());
  // Asked again before kLookEvery: told when, without looking.
  v = w.watch.Look(client.get(), false, 1, t0 + milliseconds(10));
  EXPECT_EQ(v.action, Verdict::kKeep);
  EXPECT_EQ(v.look_ms, TcpStallWatch::kLookEvery.count() - 10);
  v = w.watch.Look(client.get(), false, 1, t0 + TcpStallWatch::kLookEvery - nanoseconds(1));
  EXPECT_EQ(v.look_ms, 1);  // rounded up, never 0 (0 means "replaced")
  // However long the server takes to answer, a healthy connection stays.
  for (milliseconds at : {TcpStallWatch::kLookEvery, TcpStallWatch::kConnectPatience,
                          milliseconds(3600 * 1000)}) {
    v = w.watch.Look(client.get(), false, 1, t0 + at);
    EXPECT_EQ(v.action, Verdict::kKeep) << at.count();
    EXPECT_EQ(v.look_ms, TcpStallWatch::kLookEvery.count()) << at.count();
  }
  EXPECT_EQ(w.probes, 0);
}

TEST(TcpStallLook, UnansweredSynIsProbedThenGivenUpAtConnectPatience) {
  FullListener full;
  Fd conn = UnansweredConnect(full);
  Watch w(Address(full.port));  // the probes go unanswered too

  // Looked at every kLookEvery; from kProbeEvery on, waiting on TCP: looked
  // at every kProbeLook, with a fresh probe (a new SYN) every kProbeEvery,
  // until kConnectPatience gives the attempt up.
  const Looks looks = FollowLooks(w, conn.get(), true, 0, Clock::now(), milliseconds(5000));
  EXPECT_EQ(looks.last.action, Verdict::kAbandon);
  std::vector<int64_t> expected = {0, 50};
  for (int64_t t : Every(100, 20, 1000)) expected.push_back(t);
  EXPECT_EQ(looks.at_ms, expected);
  EXPECT_EQ(looks.probe_ms, Every(100, 100, 900));
  EXPECT_EQ(Info(conn.get()).tcpi_state, TCP_SYN_SENT);
  // The owner abandons the attempt and tells the watch: the probe ends.
  const int with_probe = OpenFds();
  w.watch.Forget();
  EXPECT_EQ(OpenFds(), with_probe - 1);
}

TEST(TcpStallLook, UnansweredSynIsReconnectedAtOnceWhenTheServerAnswersAProbe) {
  FullListener full;
  Fd conn = UnansweredConnect(full);
  Fd answering = BoundSocket(8);  // the server, reached again
  Watch w(Address(LocalPort(answering.get())));
  const Clock::time_point t0 = Clock::now();

  EXPECT_EQ(w.watch.Look(conn.get(), true, 0, t0).action, Verdict::kKeep);
  Verdict v = w.watch.Look(conn.get(), true, 0, t0 + TcpStallWatch::kProbeEvery);
  EXPECT_EQ(v.action, Verdict::kKeep);
  EXPECT_EQ(v.look_ms, TcpStallWatch::kProbeLook.count());
  ASSERT_EQ(w.probes, 1);
  ASSERT_TRUE(Ready(answering.get(), POLLIN)) << "the probe's handshake never completed";

  v = w.watch.Look(conn.get(), true, 0,
                   t0 + TcpStallWatch::kProbeEvery + TcpStallWatch::kProbeLook);
  EXPECT_EQ(v.action, Verdict::kReconnectNow);
  EXPECT_NE(v.why.find("SYN unanswered, sent 120ms ago"), std::string::npos) << v.why;
  EXPECT_NE(v.why.find("the server answers a new connection"), std::string::npos) << v.why;
}

TEST(TcpStallLook, ReusedDescriptorNumberIsANewConnectAttempt) {
  FullListener full;
  Fd first = UnansweredConnect(full);
  Watch w(Address(full.port));
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(w.watch.Look(first.get(), true, 0, t0).action, Verdict::kKeep);

  // The owner closes its socket and the next one gets the same number.
  Fd second = UnansweredConnect(full);
  ASSERT_NE(LocalPort(second.get()), LocalPort(first.get()));
  ASSERT_EQ(dup2(second.get(), first.get()), first.get()) << std::strerror(errno);
  const Clock::time_point t1 = t0 + TcpStallWatch::kConnectPatience - milliseconds(100);
  EXPECT_EQ(w.watch.Look(first.get(), true, 0, t1).action, Verdict::kKeep);
  // Patience counts from the new attempt, not from the number's first use.
  EXPECT_EQ(w.watch.Look(first.get(), true, 0, t0 + TcpStallWatch::kConnectPatience).action,
            Verdict::kKeep);
  EXPECT_EQ(w.watch.Look(first.get(), true, 0, t1 + TcpStallWatch::kConnectPatience).action,
            Verdict::kAbandon);
}

// ---- The session handshake ------------------------------------------------

// A connection a server accepted (its kernel did) whose handshake is never
// answered: the process behind the port is not serving it, as a ZooKeeper
// restarted under its clients once did for 13.3 s.
struct SilentServer {
  Fd listener = BoundSocket(8);
  int port = LocalPort(listener.get());
  Fd Connect() {
    Fd c = StartConnect(port);
    EXPECT_TRUE(Ready(c.get(), POLLOUT)) << "the listener never answered the SYN";
    EXPECT_EQ(Info(c.get()).tcpi_state, TCP_ESTABLISHED);
    // The handshake request, acknowledged by the kernel, never answered.
    EXPECT_EQ(write(c.get(), "connect", 7), 7);
    EXPECT_TRUE(testing::WaitFor([&] { return Info(c.get()).tcpi_unacked == 0; }, kWithin));
    return c;
  }
};

TEST(TcpStallHandshake, PatienceIsASixthOfTheSessionAtLeastHalfASecondAndNoneUntilSet) {
  TcpStallWatch w([] { return std::string(); });
  EXPECT_EQ(w.handshake_patience(), milliseconds(0));
  w.SetSessionTimeout(milliseconds(20000));
  EXPECT_EQ(w.handshake_patience(), milliseconds(3333));
  w.SetSessionTimeout(milliseconds(6000));
  EXPECT_EQ(w.handshake_patience(), milliseconds(1000));
  w.SetSessionTimeout(milliseconds(1200));
  EXPECT_EQ(w.handshake_patience(), TcpStallWatch::kMinHandshakePatience);
}

TEST(TcpStallHandshake, NoSessionTimeoutNeverGivesAHandshakeUp) {
  SilentServer server;
  Fd conn = server.Connect();
  Watch w(Address(server.port));
  const Looks looks = FollowLooks(w, conn.get(), true, 0, Clock::now(), milliseconds(30000));
  EXPECT_EQ(looks.last.action, Verdict::kKeep);
  EXPECT_EQ(looks.at_ms.back(), 30000);
  EXPECT_EQ(w.probes, 0);
}

TEST(TcpStallHandshake, AnUnansweredHandshakeIsReconnectedAtPatienceWhichDoublesUntilAnswered) {
  SilentServer server;
  Watch w(Address(server.port));
  w.watch.SetSessionTimeout(milliseconds(6000));  // patience 1 s, at most 4 s
  Clock::time_point t = Clock::now();
  for (int64_t patience : {1000, 2000, 4000, 4000}) {
    Fd conn = server.Connect();
    const Looks looks = FollowLooks(w, conn.get(), true, 0, t, milliseconds(10000));
    EXPECT_EQ(looks.last.action, Verdict::kReconnectNow) << patience;
    EXPECT_EQ(looks.at_ms.back(), patience);
    EXPECT_NE(looks.last.why.find("not answered in " + std::to_string(patience / 1000) + "s"),
              std::string::npos)
        << looks.last.why;
    EXPECT_EQ(w.probes, 0);  // the path works: no probe needed
    w.watch.Forget();        // the owner abandons it
    t += milliseconds(patience);
  }
  // Answered (the session connected): back to the start.
  w.watch.HandshakeDone();
  EXPECT_EQ(w.watch.handshake_patience(), milliseconds(1000));
  Fd conn = server.Connect();
  const Looks looks = FollowLooks(w, conn.get(), true, 0, t, milliseconds(10000));
  EXPECT_EQ(looks.last.action, Verdict::kReconnectNow);
  EXPECT_EQ(looks.at_ms.back(), 1000);
}

TEST(TcpStallHandshake, AConnectedSessionsSlowAnswerIsNeverGivenUp) {
  SilentServer server;
  Fd conn = server.Connect();
  Watch w(Address(server.port));
  w.watch.SetSessionTimeout(milliseconds(6000));
  // No handshake pending, a request out for an hour: kept.
  const Looks looks = FollowLooks(w, conn.get(), false, 1, Clock::now(), milliseconds(3600000));
  EXPECT_EQ(looks.last.action, Verdict::kKeep);
  EXPECT_EQ(looks.at_ms.back(), 3600000);
}

// A connection whose server stops reading: its window closes, the bytes
// left to send wait on TCP's probe timer, which backs off (200 ms, 400,
// 800... on loopback): the stall seen in an outage with tcpi_unacked 0.
struct StalledConnection {
  static constexpr int kBuffer = 4096;  // small buffers: the window closes fast
  Fd listener = BoundSocket(8, kBuffer);
  int port = LocalPort(listener.get());
  Fd client = StartConnect(port, kBuffer);
  Fd server;

  StalledConnection() {
    EXPECT_TRUE(Ready(client.get(), POLLOUT));
    server = Fd(accept(listener.get(), nullptr, nullptr));
    EXPECT_GE(server.get(), 0) << std::strerror(errno);
    std::vector<char> bytes(65536, 'x');
    while (write(client.get(), bytes.data(), bytes.size()) > 0) {
    }
    EXPECT_EQ(errno, EAGAIN) << std::strerror(errno);
  }

  // Waits for TCP to back off twice (Classify's threshold, the event under test).
  bool BacksOff() {
    return testing::WaitFor([&] { return Info(client.get()).tcpi_backoff >= 2; }, kWithin);
  }

  // The server reads again, until the window has reopened and TCP's
  // backoff has ended.
  bool Recovers() {
    return testing::WaitFor(
        [&] {
          char buf[65536];
          while (recv(server.get(), buf, sizeof(buf), MSG_DONTWAIT) > 0) {
          }
          return Info(client.get()).tcpi_backoff == 0;
        },
        kWithin);
  }
};

TEST(TcpStallLook, StalledConnectionIsReconnectedAtOnceWhenTheServerAnswersAProbe) {
  StalledConnection c;
  Watch w(Address(c.port));  // the same server, answering a new connection
  ASSERT_TRUE(c.BacksOff());
  ASSERT_EQ(Info(c.client.get()).tcpi_state, TCP_ESTABLISHED);
  const Clock::time_point t0 = Clock::now();

  Verdict v = w.watch.Look(c.client.get(), false, 1, t0);
  EXPECT_EQ(v.action, Verdict::kKeep);
  EXPECT_EQ(v.look_ms, TcpStallWatch::kProbeLook.count());
  ASSERT_EQ(w.probes, 1);
  ASSERT_TRUE(Ready(c.listener.get(), POLLIN)) << "the probe's handshake never completed";

  v = w.watch.Look(c.client.get(), false, 1, t0 + TcpStallWatch::kProbeLook);
  EXPECT_EQ(v.action, Verdict::kReconnectNow);
  EXPECT_NE(v.why.find("TCP backing off, last ack"), std::string::npos) << v.why;
}

TEST(TcpStallLook, StalledConnectionThatRecoversIsKeptAndItsProbeClosed) {
  StalledConnection c;
  FullListener full;  // the probe goes unanswered
  Watch w(Address(full.port));
  ASSERT_TRUE(c.BacksOff());
  const int before = OpenFds();
  const Clock::time_point t0 = Clock::now();

  Verdict v = w.watch.Look(c.client.get(), false, 1, t0);
  EXPECT_EQ(v.action, Verdict::kKeep);
  EXPECT_EQ(v.look_ms, TcpStallWatch::kProbeLook.count());
  ASSERT_EQ(w.probes, 1);
  EXPECT_EQ(OpenFds(), before + 1);  // the probe

  // The server reads again and answers: the connection is idle.
  ASSERT_TRUE(c.Recovers());
  v = w.watch.Look(c.client.get(), false, 0, t0 + TcpStallWatch::kProbeLook);
  EXPECT_EQ(v.action, Verdict::kKeep);
  EXPECT_EQ(v.look_ms, -1);  // nothing to look at until a request goes out
  EXPECT_EQ(OpenFds(), before);  // no probe left behind
}

TEST(TcpStallLook, StalledConnectionIsKeptWhileTheServerRefusesProbes) {
  StalledConnection c;
  Fd refusing = BoundSocket(-1);  // the server's host up, its process down
  Watch w(Address(LocalPort(refusing.get())));
  ASSERT_TRUE(c.BacksOff());

  // Never given up (only an unanswered SYN is): looked at every
  // kProbeLook, probed every kProbeEvery.
  const Looks looks = FollowLooks(w, c.client.get(), false, 1, Clock::now(), milliseconds(1990));
  EXPECT_EQ(looks.last.action, Verdict::kKeep);
  EXPECT_EQ(looks.last.look_ms, TcpStallWatch::kProbeLook.count());
  EXPECT_EQ(looks.at_ms, Every(0, 20, 1980));
  EXPECT_EQ(looks.probe_ms, Every(0, 100, 1900));
  EXPECT_EQ(Info(c.client.get()).tcpi_state, TCP_ESTABLISHED);
}

}  // namespace
}  // namespace turnstile
