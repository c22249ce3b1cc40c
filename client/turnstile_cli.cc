// turnstile: command-line client for turnstiled.
//
//   turnstile acquire NAME [--wait D] [--ttl D] [--owner O] [--hold D]
//   turnstile describe NAME
//   turnstile list [PREFIX]
//   turnstile release LEASE_ID
//
// The server address comes from --server or TURNSTILE_SERVER.
#include <csignal>
#include <cstdio>
#include <pthread.h>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "server/flags.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace {

using turnstile::v1::AcquireEvent;

int Fail(const grpc::Status& s) {
  std::fprintf(stderr, "turnstile: %d %s\n", static_cast<int>(s.error_code()),
               s.error_message().c_str());
  return 1;
}

void SetDuration(std::chrono::milliseconds d, google::protobuf::Duration* out) {
  out->set_seconds(d.count() / 1000);
  out->set_nanos(static_cast<int>(d.count() % 1000) * 1000000);
}

int Acquire(turnstile::v1::LockService::Stub* stub, const std::string& name,
            const std::string& owner, std::chrono::milliseconds wait,
            std::chrono::milliseconds ttl, std::chrono::milliseconds hold) {
  grpc::ClientContext ctx;
  auto rw = stub->Acquire(&ctx);
  turnstile::v1::AcquireRequest req;
  auto* open = req.mutable_open();
  open->set_name(name);
  open->set_owner(owner);
  SetDuration(wait, open->mutable_wait_timeout());
  SetDuration(ttl, open->mutable_ttl());
  rw->Write(req);
  // Releases on SIGINT/SIGTERM, or after --hold.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  std::thread releaser;
  AcquireEvent ev;
  while (rw->Read(&ev)) {
    switch (ev.type()) {
      case AcquireEvent::QUEUED:
        std::printf("QUEUED position=%lld ahead=%lld\n",
                    static_cast<long long>(ev.queued().position()),
                    static_cast<long long>(ev.queued().ahead()));
        break;
      case AcquireEvent::ACQUIRED:
        std::printf("ACQUIRED fencing_token=%llu lease_id=%s\n",
                    static_cast<unsigned long long>(ev.acquired().fencing_token()),
                    ev.acquired().lease_id().c_str());
        releaser = std::thread([&rw, stop, hold] {
          if (hold.count() > 0) {
            timespec ts{static_cast<time_t>(hold.count() / 1000),
                        static_cast<long>(hold.count() % 1000) * 1000000};
            sigtimedwait(&stop, nullptr, &ts);
          } else {
            int sig;
            sigwait(&stop, &sig);
          }
          rw->WritesDone();  // half-close releases the lock
        });
        break;
      case AcquireEvent::SUSPENDED:
        std::printf("SUSPENDED safe_for=%llds\n",
                    static_cast<long long>(ev.suspended().safe_for().seconds()));
        break;
      case AcquireEvent::RESUMED:
        std::printf("RESUMED\n");
        break;
      case AcquireEvent::LOST:
        std::printf("LOST reason=%s %s\n",
                    turnstile::v1::Lost::Reason_Name(ev.lost().reason()).c_str(),
                    ev.lost().message().c_str());
        break;
      case AcquireEvent::RELEASED:
        std::printf("RELEASED\n");
        break;
      default:
        break;
    }
    std::fflush(stdout);
  }
  grpc::Status s = rw->Finish();
  if (releaser.joinable()) {
    pthread_kill(releaser.native_handle(), SIGTERM);
    releaser.join();
  }
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

int main(int argc, char** argv) {
  // Stop signals are taken synchronously by the releaser thread.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  std::string server = "127.0.0.1:7400", owner;
  std::chrono::milliseconds wait(3600 * 1000), ttl(0), hold(0);
  turnstile::FlagSet flags("turnstile acquire|describe|list|release");
  flags.String("server", &server, "turnstiled address");
  flags.String("owner", &owner, "acquire: owner shown by describe");
  flags.Duration("wait", &wait, "acquire: wait timeout (0 = try once)");
  flags.Duration("ttl", &ttl, "acquire: lease ttl (0 = while connected)");
  flags.Duration("hold", &hold, "acquire: release after this long (0 = until interrupted)");
  bool help = false;
  auto args = flags.Parse(argc, argv, &help);
  if (help || !args.ok() || args->empty()) {
    if (!args.ok()) std::fprintf(stderr, "turnstile: %s\n", std::string(args.status().message()).c_str());
    std::fputs(flags.Usage().c_str(), help ? stdout : stderr);
    return help ? 0 : 2;
  }
  auto stub = turnstile::v1::LockService::NewStub(
      grpc::CreateChannel(server, grpc::InsecureChannelCredentials()));
  const std::string& cmd = (*args)[0];
  if (cmd == "acquire" && args->size() == 2) {
    return Acquire(stub.get(), (*args)[1], owner, wait, ttl, hold);
  }
  if (cmd == "describe" && args->size() == 2) {
    grpc::ClientContext ctx;
    turnstile::v1::DescribeRequest req;
    req.set_name((*args)[1]);
    turnstile::v1::DescribeResponse resp;
    grpc::Status s = stub->Describe(&ctx, req, &resp);
    if (!s.ok()) return Fail(s);
    for (const auto& c : resp.holders()) {
      std::printf("HOLDER owner=%s fencing_token=%llu replica=%s\n", c.owner().c_str(),
                  static_cast<unsigned long long>(c.fencing_token()), c.replica_id().c_str());
    }
    for (const auto& c : resp.waiters()) {
      std::printf("WAITER position=%lld owner=%s replica=%s\n", static_cast<long long>(c.position()),
                  c.owner().c_str(), c.replica_id().c_str());
    }
    return 0;
  }
  if (cmd == "list" && args->size() <= 2) {
    grpc::ClientContext ctx;
    turnstile::v1::ListRequest req;
    if (args->size() == 2) req.set_prefix((*args)[1]);
    turnstile::v1::ListResponse resp;
    grpc::Status s = stub->List(&ctx, req, &resp);
    if (!s.ok()) return Fail(s);
    for (const auto& n : resp.names()) std::printf("%s\n", n.c_str());
    return 0;
  }
  if (cmd == "release" && args->size() == 2) {
    grpc::ClientContext ctx;
    turnstile::v1::ReleaseRequest req;
    req.set_lease_id((*args)[1]);
    turnstile::v1::ReleaseResponse resp;
    grpc::Status s = stub->Release(&ctx, req, &resp);
    return s.ok() ? 0 : Fail(s);
  }
  std::fputs(flags.Usage().c_str(), stderr);
  return 2;
}
