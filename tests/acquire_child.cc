// A client process for tests that need a client to die: opens one Acquire
// stream and prints each event as a line ("QUEUED 2", "ACQUIRED <token>",
// ...), then holds until killed.
// Usage: acquire_child ADDRESS NAME WAIT_MS [LOCK_DELAY_MS]
#include <cstdio>
#include <cstdlib>
#include <string>

#include <grpcpp/grpcpp.h>

#include "client/lib/tls.h"
#include "turnstile/v1/lock.grpc.pb.h"

// Plaintext, or TLS from TURNSTILE_TLS_* (the suite's mTLS mode).
static std::shared_ptr<grpc::ChannelCredentials> TlsFromEnv() {
  auto creds = turnstile::client::MakeChannelCredentials(turnstile::client::TlsFiles::FromEnv());
  if (!creds.ok()) {
    std::fprintf(stderr, "acquire_child: %s\n", std::string(creds.status().message()).c_str());
    std::exit(2);
  }
  return *creds;
}

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: acquire_child ADDRESS NAME WAIT_MS [LOCK_DELAY_MS]\n");
    return 2;
  }
  auto stub = turnstile::v1::LockService::NewStub(
      grpc::CreateChannel(argv[1], TlsFromEnv()));
  grpc::ClientContext ctx;
  auto rw = stub->Acquire(&ctx);
  turnstile::v1::AcquireRequest req;
  req.mutable_open()->set_name(argv[2]);
  req.mutable_open()->set_owner("acquire_child");
  long ms = std::atol(argv[3]);
  req.mutable_open()->mutable_wait_timeout()->set_seconds(ms / 1000);
  req.mutable_open()->mutable_wait_timeout()->set_nanos(static_cast<int>(ms % 1000) * 1000000);
  if (argc == 5) {
    long delay = std::atol(argv[4]);
    req.mutable_open()->mutable_lock_delay()->set_seconds(delay / 1000);
    req.mutable_open()->mutable_lock_delay()->set_nanos(static_cast<int>(delay % 1000) * 1000000);
  }
  rw->Write(req);
  turnstile::v1::AcquireEvent ev;
  while (rw->Read(&ev)) {
    std::string line = turnstile::v1::AcquireEvent::Type_Name(ev.type());
    if (ev.has_queued()) line += " " + std::to_string(ev.queued().position());
    if (ev.has_acquired()) line += " " + std::to_string(ev.acquired().fencing_token());
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  grpc::Status s = rw->Finish();
  std::printf("END %d %s\n", static_cast<int>(s.error_code()), s.error_message().c_str());
  return 0;
}
