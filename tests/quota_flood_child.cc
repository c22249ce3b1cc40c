// The flooding identity of quota_test, in a process of its own so that the
// test can run it at the lowest CPU priority (in production a runaway
// client runs on another machine; here it shares two cores with the
// replica and the clients it must not starve).
//
// Usage: quota_flood_child ADDRESS COUNT PREFIX   (TLS from TURNSTILE_TLS_*)
// Opens COUNT Acquire streams as fast as it can (lock PREFIX<i>, one each),
// then reads each one's first answer and prints one line:
//   flood opened=N seconds=S held=H refused=R other=O refusal=<a refusal's text>
// and keeps the held streams open until it is killed.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include "client/lib/tls.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace v1 = turnstile::v1;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: quota_flood_child ADDRESS COUNT PREFIX\n");
    return 2;
  }
  auto creds = turnstile::client::MakeChannelCredentials(turnstile::client::TlsFiles::FromEnv());
  if (!creds.ok()) {
    std::fprintf(stderr, "quota_flood_child: %s\n", std::string(creds.status().message()).c_str());
    return 2;
  }
  auto stub = v1::LockService::NewStub(grpc::CreateChannel(argv[1], *creds));
  const int count = std::atoi(argv[2]);
  const std::string prefix = argv[3];
  struct Flow {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::AcquireRequest, v1::AcquireEvent>> rw;
  };
  std::vector<Flow> flows;
  flows.reserve(static_cast<size_t>(count));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) {
    Flow f;
    f.ctx = std::make_unique<grpc::ClientContext>();
    f.ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
    f.rw = stub->Acquire(f.ctx.get());
    v1::AcquireRequest req;
    v1::AcquireOpen* open = req.mutable_open();
    open->set_name(prefix + std::to_string(i));
    open->mutable_wait_timeout()->set_seconds(60);
    f.rw->Write(req);
    flows.push_back(std::move(f));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int held = 0, refused = 0, other = 0;
  std::string refusal;
  for (Flow& f : flows) {
    v1::AcquireEvent ev;
    bool read = f.rw->Read(&ev);
    while (read && ev.type() == v1::AcquireEvent::QUEUED) read = f.rw->Read(&ev);
    if (read) {
      ev.type() == v1::AcquireEvent::ACQUIRED ? ++held : ++other;
      continue;
    }
    grpc::Status s = f.rw->Finish();
    f.rw.reset();
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      if (refusal.empty()) refusal = s.error_message();
    } else {
      ++other;
    }
  }
  std::printf("flood opened=%d seconds=%.3f held=%d refused=%d other=%d refusal=%s\n",
              static_cast<int>(flows.size()), seconds, held, refused, other, refusal.c_str());
  std::fflush(stdout);
  for (;;) pause();  // the held streams end with the process
}
