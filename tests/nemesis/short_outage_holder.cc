// short_outage_holder: the holder of tests/nemesis/short_outage.py. Opens one
// Acquire stream and prints every event as it arrives, one line each:
//   <CLOCK_MONOTONIC ns> <TYPE> [safe_for_ms] [reason]
// (safe_for of SUSPENDED, of ACQUIRED, and of RESUMED's refresh; the LOST
// reason), then "<ns> END <grpc code>" when the stream ends. The raw stream,
// not the client library: the test measures what the replica sends and
// when, without the library's own watchdog (which suspends a hold by itself
// when refreshes stop) in between. Holds until killed (the replica deletes
// the node of a client that is gone).
// Usage: short_outage_holder ADDRESS NAME
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include <grpcpp/grpcpp.h>

#include "turnstile/v1/lock.grpc.pb.h"

namespace {

int64_t NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t Ms(const google::protobuf::Duration& d) {
  return d.seconds() * 1000 + d.nanos() / 1000000;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: short_outage_holder ADDRESS NAME\n");
    return 2;
  }
  auto stub = turnstile::v1::LockService::NewStub(
      grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  auto rw = stub->Acquire(&ctx);
  turnstile::v1::AcquireRequest req;
  req.mutable_open()->set_name(argv[2]);
  req.mutable_open()->set_owner("short_outage_holder");
  req.mutable_open()->mutable_wait_timeout()->set_seconds(10);
  if (!rw->Write(req)) {
    std::printf("%lld END write-failed\n", static_cast<long long>(NowNs()));
    return 1;
  }
  turnstile::v1::AcquireEvent ev;
  while (rw->Read(&ev)) {
    const int64_t t = NowNs();
    std::string line = std::to_string(t) + " " + turnstile::v1::AcquireEvent::Type_Name(ev.type());
    if (ev.has_suspended()) line += " " + std::to_string(Ms(ev.suspended().safe_for()));
    if (ev.has_acquired()) line += " " + std::to_string(Ms(ev.acquired().safe_for()));
    if (ev.type() == turnstile::v1::AcquireEvent::RESUMED && ev.has_still_held()) {
      line += " " + std::to_string(Ms(ev.still_held().safe_for()));
    }
    if (ev.has_lost()) line += " " + turnstile::v1::Lost::Reason_Name(ev.lost().reason());
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  grpc::Status s = rw->Finish();
  std::printf("%lld END %d\n", static_cast<long long>(NowNs()), static_cast<int>(s.error_code()));
  std::fflush(stdout);
  return 0;
}
