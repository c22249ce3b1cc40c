// W5's baseline (issue 20, must-show 4): the replica's RSS with W5's idle
// streams, over the RSS of gRPC alone holding the same streams. Not a
// public API.
#ifndef TURNSTILE_CLIENT_BENCH_BARE_GRPC_H_
#define TURNSTILE_CLIENT_BENCH_BARE_GRPC_H_

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

}  // namespace turnstile::bench

#endif  // TURNSTILE_CLIENT_BENCH_BARE_GRPC_H_
