#include "server/zk/tcp_stall.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "client/common/flags.h"

namespace turnstile {

namespace {

int MsUntil(TcpStallWatch::Clock::time_point t, TcpStallWatch::Clock::time_point now) {
  return static_cast<int>(
      std::max<int64_t>(1, std::chrono::ceil<std::chrono::milliseconds>(t - now).count()));
}

int LocalPort(int fd) {
  struct sockaddr_storage local {};
  socklen_t len = sizeof(local);
  if (getsockname(fd, reinterpret_cast<struct sockaddr*>(&local), &len) != 0) return 0;
  return local.ss_family == AF_INET6
             ? ntohs(reinterpret_cast<struct sockaddr_in6*>(&local)->sin6_port)
             : ntohs(reinterpret_cast<struct sockaddr_in*>(&local)->sin_port);
}

}  // namespace

TcpStallWatch::Verdict TcpStallWatch::Look(int fd, bool pending, int in_flight,
                                           Clock::time_point now) {
  Verdict v;
  if (fd < 0) {
    Forget();
    return v;
  }
  if (fd != watched_fd_) NewAttempt(fd, 0, now);
  if (!pending && in_flight == 0 && probe_fd_ < 0) return v;
  if (now < next_look_) {
    v.look_ms = MsUntil(next_look_, now);
    return v;
  }
  next_look_ = now + kLookEvery;
  // The same descriptor number may be a new connection (its owner closed
  // the old one and the next socket got its number): the local port tells.
  const int port = LocalPort(fd);
  if (port != watched_port_) NewAttempt(fd, port, now);
  struct tcp_info ti {};
  socklen_t len = sizeof(ti);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return v;
  const TcpWait wait = Classify(ti.tcpi_state, ti.tcpi_backoff, now - since_);
  if (wait == TcpWait::kGiveUp) {
    v.action = Verdict::kAbandon;
    return v;
  }
  if (wait == TcpWait::kNotWaiting) {
    CloseProbe();
    v.look_ms = pending || in_flight > 0 ? static_cast<int>(kLookEvery.count()) : -1;
    if (pending && ti.tcpi_state == TCP_ESTABLISHED && handshake_patience_.count() > 0) {
      // Connected, the session handshake not answered yet.
      if (!handshake_since_) handshake_since_ = now;
      const Clock::duration waited = now - *handshake_since_;
      if (waited >= handshake_patience_) {
        v.action = Verdict::kReconnectNow;
        v.why = "waits on the session handshake: the server accepted the connection but has "
                "not answered in " +
                FormatDuration(std::chrono::duration_cast<std::chrono::milliseconds>(waited));
        handshake_patience_ =
            std::min(handshake_patience_ * 2, std::max(HandshakeBase(), session_timeout_ * 2 / 3));
        return v;
      }
      v.look_ms = std::min(v.look_ms, MsUntil(*handshake_since_ + handshake_patience_, now));
    }
    return v;
  }
  next_look_ = now + kProbeLook;
  if (probe_fd_ >= 0) {
    struct pollfd p = {probe_fd_, POLLOUT, 0};
    int err = 0;
    socklen_t elen = sizeof(err);
    if (poll(&p, 1, 0) == 1 && getsockopt(probe_fd_, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 &&
        err == 0 && (p.revents & (POLLERR | POLLHUP)) == 0) {
      CloseProbe();
      const std::chrono::milliseconds ago =
          ti.tcpi_state == TCP_SYN_SENT
              ? std::chrono::duration_cast<std::chrono::milliseconds>(now - since_)
              : std::chrono::milliseconds(ti.tcpi_last_ack_recv);
      v.action = Verdict::kReconnectNow;
      v.why = std::string(ti.tcpi_state == TCP_SYN_SENT ? "waits on TCP: SYN unanswered, sent "
                                                        : "waits on TCP: TCP backing off, last ack ") +
              FormatDuration(ago) + " ago; the server answers a new connection";
      return v;
    }
    if (p.revents != 0 || now - probe_since_ >= kProbeEvery) CloseProbe();  // a fresh SYN
  }
  // A new probe at most every kProbeEvery, also when the last one was
  // refused at once (a server host up, its process down).
  if (probe_fd_ < 0 && now - probe_since_ >= kProbeEvery) StartProbe(now);
  v.look_ms = static_cast<int>(kProbeLook.count());
  return v;
}

TcpStallWatch::TcpWait TcpStallWatch::Classify(int tcp_state, int backoff,
                                               Clock::duration attempt_age) {
  if (tcp_state == TCP_SYN_SENT) {
    if (attempt_age >= kConnectPatience) return TcpWait::kGiveUp;
    return attempt_age >= kProbeEvery ? TcpWait::kWaiting : TcpWait::kNotWaiting;
  }
  // Two backoffs of the retransmission timer (data unacknowledged) or of
  // the probe timer (data not sent yet: seen on a cut with tcpi_unacked 0
  // and tcpi_probes climbing).
  if (tcp_state == TCP_ESTABLISHED && backoff >= 2) return TcpWait::kWaiting;
  return TcpWait::kNotWaiting;
}

void TcpStallWatch::Forget() {
  CloseProbe();
  watched_fd_ = -1;
  watched_port_ = 0;
  handshake_since_.reset();
}

std::chrono::milliseconds TcpStallWatch::HandshakeBase() const {
  if (session_timeout_.count() <= 0) return std::chrono::milliseconds(0);
  return std::max(kMinHandshakePatience, session_timeout_ / kHandshakeShare);
}

void TcpStallWatch::SetSessionTimeout(std::chrono::milliseconds timeout) {
  if (timeout == session_timeout_) return;
  const bool at_start = handshake_patience_ == HandshakeBase();
  session_timeout_ = timeout;
  if (at_start || handshake_patience_.count() == 0) {
    handshake_patience_ = HandshakeBase();
  } else {
    handshake_patience_ = std::min(handshake_patience_,
                                   std::max(HandshakeBase(), session_timeout_ * 2 / 3));
  }
}

void TcpStallWatch::NewAttempt(int fd, int port, Clock::time_point now) {
  if (fd != watched_fd_) next_look_ = now;  // look at once
  watched_fd_ = fd;
  watched_port_ = port;
  since_ = now;
  handshake_since_.reset();
  CloseProbe();
}

// A non-blocking connect to the server the connection is for, by address
// (no name resolution on the loop).
void TcpStallWatch::StartProbe(Clock::time_point now) {
  probe_since_ = now;
  const std::string s = current_server_ ? current_server_() : std::string();
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos) return;
  const int port = std::atoi(s.c_str() + colon + 1);
  const std::string host = s.substr(0, colon);
  struct sockaddr_storage ss {};
  socklen_t sl = 0;
  auto* v4 = reinterpret_cast<struct sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<struct sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    sl = sizeof(*v4);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    sl = sizeof(*v6);
  } else {
    return;
  }
  const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  if (connect(fd, reinterpret_cast<struct sockaddr*>(&ss), sl) != 0 && errno != EINPROGRESS) {
    close(fd);  // refused at once: the server does not answer (yet)
    return;
  }
  probe_fd_ = fd;
}

void TcpStallWatch::CloseProbe() {
  if (probe_fd_ < 0) return;
  // Reset, not FIN: no TIME_WAIT, and the server sees the probe end at once.
  struct linger lg {1, 0};
  setsockopt(probe_fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(probe_fd_);
  probe_fd_ = -1;
}

}  // namespace turnstile
