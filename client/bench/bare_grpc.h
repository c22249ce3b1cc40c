// W5's baseline (issue 20, must-show 4): the replica's RSS with W5's idle
// streams, over the RSS of gRPC alone holding the same streams. Not a
// public API.
#ifndef TURNSTILE_CLIENT_BENCH_BARE_GRPC_H_
#define TURNSTILE_CLIENT_BENCH_BARE_GRPC_H_

#include <memory>
#include <string>
#include <vector>

#include "client/bench/bench_internal.h"
#include "turnstile/v1/lock.pb.h"

namespace turnstile::bench {

// One stream of W5: the open request it sends and the channel it uses.
struct IdleStream {
  const v1::AcquireOpen* open;
  int channel;  // 0 .. o.w5_channels - 1
};

// Starts o.bare_server (turnstile-bare-server) on a free loopback port,
// opens `streams` to it over o.w5_channels channels with the same client
// code as W5's (AcquireCall), waits until each got its QUEUED, lets them sit
// for o.w5_idle (the window the replica's RSS is read after), reads the
// server's VmRSS, then cancels the streams and stops the server (SIGTERM,
// SIGKILL after 10 s). Bounded in time; the server is gone when it returns.
// REQUIRES: !o.bare_server.empty().
BareGrpcResult MeasureBareGrpc(const BenchOptions& o, const std::vector<IdleStream>& streams);

// W1's and W3's gRPC baseline (issue 20): the same acquire+release cycles,
// through the same client code (TurnstileCycles), against
// turnstile-bare-server --grant, which answers each open with ACQUIRED and
// each release with RELEASED and holds no lock: what a cycle costs gRPC
// alone, in the server and in the client. Started by Start, measured slice
// by slice (interleaved with the other sides by the caller), stopped by the
// destructor.
class BareCycles {
 public:
  BareCycles();
  ~BareCycles();
  BareCycles(const BareCycles&) = delete;
  BareCycles& operator=(const BareCycles&) = delete;

  // Starts o.bare_server --grant and connects one channel per name.
  // REQUIRES: !o.bare_server.empty().
  bool Start(const BenchOptions& o, const std::vector<std::string>& names, std::string* error);
  // One slice; the server's and this process's CPU and switches over it are
  // added to `usage` (usage->server: the bare server).
  CycleSamples Run(Millis duration, SideUsage* usage);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace turnstile::bench

#endif  // TURNSTILE_CLIENT_BENCH_BARE_GRPC_H_
