// TcpStallWatch: tells a ZooKeeper connection that waits on TCP from one
// that waits on ZooKeeper, and says when to give it up for a new one.
//
// Why. A 1.7 s cut of a replica from its ZooKeeper (session 4 s) lost the
// hold in 1 of 4 runs: after the heal the C client took 0.3-0.5 s more to
// talk to ZooKeeper again, past the holder's safe time. Its connection was
// not broken, only waiting on TCP: data sent during the cut is
// retransmitted with exponential backoff (200 ms, 400, 800, 1600... on a
// LAN), so the next retransmission after a 1.7 s cut comes up to 1.3 s
// after the heal; a connect begun during the cut waits for its SYN's
// retransmission (1 s, then 3 s); and the C client itself gives up on a
// silent connection only after 2/3 of the session timeout. Like the Java
// client, it never replaces a connection that is merely slow.
//
// How. While a request is outstanding (or a connect is pending) the
// session's loop calls Look, at most every kLookEvery: TCP_INFO tells a
// connection waiting on TCP's backoff (two backoffs of the retransmission
// or probe timer; an acknowledgement of anything resets it, healthy
// connections sit at 0), or a SYN unanswered for kProbeEvery, from a
// server that is merely slow (its kernel acknowledges our data at once).
// While it waits, a probe (a fresh non-blocking connect to the same
// server, renewed every kProbeEvery: a new SYN each time) asks whether the
// path works now. When the server answers the probe, the verdict is
// kReconnectNow: the caller abandons the connection and reconnects at once
// (the same session). A connect no SYN answer reached for kConnectPatience
// is kAbandon: the next attempt (the next server of the list, or a fresh
// SYN) does not wait for TCP's 3 s retransmission. Measured with
// tests/nemesis/short_outage.py.
//
// The handshake. A server that accepted the connection (its kernel did)
// but does not answer the session handshake is given up after the
// handshake patience, and reconnected at once: seen on a ZooKeeper
// restarted under its clients (a connect that reached the new process
// while it started got neither an answer nor a close for 13.3 s, the C
// client's 2/3 of a 20 s session, past the holders' safe time, which
// were then LOST). The patience starts at kHandshakeShare of the session
// timeout (at least kMinHandshakePatience) and doubles with each
// handshake given up in a row, up to the C client's own 2/3, so a server
// that is merely slow to answer handshakes is not hammered; an answered
// handshake (HandshakeDone) resets it. The Java client's connect timeout
// is the session timeout over the number of servers (1/3 for three).
// Once the session is connected, a slow answer is never a reason to go.
//
// Plain sockets, no zookeeper.h. Not thread-safe: one loop's own.
#ifndef TURNSTILE_SERVER_ZK_TCP_STALL_H_
#define TURNSTILE_SERVER_ZK_TCP_STALL_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace turnstile {

class TcpStallWatch {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kLookEvery{50};
  static constexpr std::chrono::milliseconds kProbeLook{20};
  static constexpr std::chrono::milliseconds kProbeEvery{100};
  static constexpr std::chrono::milliseconds kConnectPatience{1000};
  static constexpr std::chrono::milliseconds kMinHandshakePatience{500};
  static constexpr int kHandshakeShare = 6;  // patience: session timeout / 6

  struct Verdict {
    enum Action { kKeep, kAbandon, kReconnectNow };
    Action action = kKeep;
    int look_ms = -1;  // when to look again (-1: only when asked)
    std::string why;   // for kReconnectNow, a line for the log
  };

  // `current_server`: the numeric "address:port" the connection is for
  // (asked only when a probe starts).
  explicit TcpStallWatch(std::function<std::string()> current_server)
      : current_server_(std::move(current_server)) {}
  ~TcpStallWatch() { Forget(); }
  TcpStallWatch(const TcpStallWatch&) = delete;
  TcpStallWatch& operator=(const TcpStallWatch&) = delete;

  // `fd`: the connection's socket (-1: none); `pending`: a connect or the
  // session handshake is under way; `in_flight`: requests awaiting replies.
  Verdict Look(int fd, bool pending, int in_flight, Clock::time_point now);
  // The connection is gone (abandoned, or closed by its owner): the next
  // socket is a new one, and a running probe is closed.
  void Forget();
  // The session timeout the handshake patience derives from (until set:
  // none, a handshake is never given up).
  void SetSessionTimeout(std::chrono::milliseconds timeout);
  // The session handshake was answered: the patience is back to its start.
  void HandshakeDone() { handshake_patience_ = HandshakeBase(); }
  std::chrono::milliseconds handshake_patience() const { return handshake_patience_; }

  // Look's reading of TCP_INFO, before any probe: what the socket waits
  // on, given its tcpi_state and tcpi_backoff and how long ago Look first
  // saw it. kWaiting: on TCP (time to probe the server); kGiveUp: a SYN
  // unanswered for kConnectPatience. Pure.
  enum class TcpWait { kNotWaiting, kWaiting, kGiveUp };
  static TcpWait Classify(int tcp_state, int backoff, Clock::duration attempt_age);

 private:
  void NewAttempt(int fd, int port, Clock::time_point now);
  void StartProbe(Clock::time_point now);
  void CloseProbe();
  std::chrono::milliseconds HandshakeBase() const;

  std::function<std::string()> current_server_;
  int watched_fd_ = -1;    // the socket Look knows
  int watched_port_ = 0;   // its local port (a reused descriptor number is a new socket)
  Clock::time_point since_{};  // when Look first saw it
  // When Look first saw it connected with the handshake pending (nullopt:
  // not yet).
  std::optional<Clock::time_point> handshake_since_;
  std::chrono::milliseconds session_timeout_{0};
  std::chrono::milliseconds handshake_patience_{0};  // 0: never given up
  Clock::time_point next_look_{};
  int probe_fd_ = -1;
  Clock::time_point probe_since_{};  // when the last probe started
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ZK_TCP_STALL_H_
