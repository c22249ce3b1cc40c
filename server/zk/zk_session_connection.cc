// The connection on the loop: the C client's socket and deadline handed to
// the EventLoop (Prepare) and its events handed back (Dispatch), and what
// the loop does about a connection in trouble within the session: one the
// C client dropped without telling, and one that waits on TCP rather than
// on ZooKeeper (tcp_stall.h). Part of ZkClientSession
// (zk_session_internal.h).
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "server/zk/zk_session_internal.h"

namespace turnstile {
namespace zk_internal {

// EventLoop::Source: the C client's socket and deadline (pings, connect
// attempts), asked before every poll.
EventLoop::Interest ZkClientSession::Prepare() {
  EventLoop::Interest in;
  if (zh_ == nullptr) return in;
  NoticeSilentClose();  // before zookeeper_interest starts the next connection
  int fd = -1, interest = 0;
  struct timeval tv {};
  zookeeper_interest(zh_, &fd, &interest, &tv);
  in.fd = fd;
  in.events = static_cast<short>(((interest & ZOOKEEPER_READ) ? POLLIN : 0) |
                                 ((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0));
  in.timeout_ms = static_cast<int>(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
  const int look_ms = WatchConnection(fd);
  if (look_ms == 0) {
    // The connection was just replaced: ask the C client again (at once).
    in.fd = -1;
    in.timeout_ms = 0;
  } else if (look_ms > 0) {
    in.timeout_ms = in.timeout_ms < 0 ? look_ms : std::min(in.timeout_ms, look_ms);
  }
  return in;
}

// ---- Short outages (see tcp_stall.h) ---------------------------------
//
// After a 1.7 s cut (session 4 s) the C client took 0.3-0.5 s more
// after the heal to talk to ZooKeeper again: its connection was waiting
// on TCP's backoff. The loop asks its TcpStallWatch about the C client's
// socket and replaces a connection that waits on TCP while the server
// answers a fresh one; the C client then re-attaches the same session
// (id and password; its watches re-sent). The session is never closed:
// no closeSession is sent, the connection is cut, not the session.

// The C client closes its socket after a failed send (ECONNRESET,
// EPIPE: a peer that reset the connection) and marks the handle not
// connected, without a session event and without failing the requests
// of that connection (zookeeper.c, nonblocking_send, 3.8). Measured: a
// replica whose ZooKeeper answered every segment with a reset never
// told its holders SUSPENDED. Report the disconnection here, and make
// the C client fail those requests (on its error path) before a new
// connection could answer in their place.
void ZkClientSession::NoticeSilentClose() {
  if (!connected_.load() || zoo_state(zh_) != ZOO_NOTCONNECTED_STATE) return;
  silently_closed_ = true;
  stall_.Forget();
  connected_ = false;
  Notify(SessionEvent::kDisconnected);
}

// On the loop, after zookeeper_interest. Returns when to look again in
// ms (-1: no need; 0: the connection was replaced, ask the C client
// again now).
int ZkClientSession::WatchConnection(int fd) {
  if (fd >= 0 && silently_closed_) {
    // The first attempt after a silent close (the old socket is closed,
    // so this is a new one): fail it, so that the C client's cleanup
    // answers the old connection's requests, each with ZCONNECTIONLOSS.
    silently_closed_ = false;
    Abandon(fd, false, nullptr);
    return 0;
  }
  const int state = fd >= 0 ? zoo_state(zh_) : 0;
  stall_.SetSessionTimeout(session_timeout());
  const TcpStallWatch::Verdict v =
      stall_.Look(fd, state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE,
                  in_flight_, std::chrono::steady_clock::now());
  if (v.action == TcpStallWatch::Verdict::kKeep) return v.look_ms;
  const bool at_once = v.action == TcpStallWatch::Verdict::kReconnectNow;
  Abandon(fd, at_once, v.why.empty() ? nullptr : v.why.c_str());
  return 0;
}

// Ends the C client's connection (or connect attempt) on `fd`, which it
// owns: shut down here (not closed: the descriptor stays the C client's
// until it closes it), then the C client sees the error at once and runs
// its error path (requests failed with ZCONNECTIONLOSS, the session event
// if it was connected). With `path_up` (a probe just reached the server)
// the C client's pause before reconnecting to the last server of its
// list is skipped: it exists so that a client does not spin on dead
// servers, and this one answers.
void ZkClientSession::Abandon(int fd, bool path_up, const char* why) {
  if (why != nullptr) {
    std::fprintf(stderr, "turnstile: ZooKeeper connection to %s %s; reconnecting\n",
                 zoo_get_current_server(zh_), why);
  }
  struct linger lg {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  shutdown(fd, SHUT_RDWR);
  zookeeper_process(zh_, ZOOKEEPER_READ | ZOOKEEPER_WRITE);
  stall_.Forget();
  if (path_up && zh_ != nullptr) {
    int nfd = -1, interest = 0;
    struct timeval tv {};
    zookeeper_interest(zh_, &nfd, &interest, &tv);  // consumes the pause (fd stays -1)
  }
}

void ZkClientSession::Dispatch(short revents) {
  if (zh_ == nullptr) return;
  int events = 0;
  if (revents & (POLLIN | POLLHUP | POLLERR)) events |= ZOOKEEPER_READ;
  if (revents & POLLOUT) events |= ZOOKEEPER_WRITE;
  zookeeper_process(zh_, events);  // also due pings and timeouts
}

}  // namespace zk_internal
}  // namespace turnstile
