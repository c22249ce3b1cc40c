// Client::Observe: one thread reads the stream (a blocking reader); when it
// fails with anything but the name's own refusal it says "unknown" and
// observes again after a backoff.
//
// Threads and locks: the observation's thread runs Run and on_state /
// on_end; Stop comes from the owner's thread. mu_ is a leaf, never held
// while a callback runs or a call is made (but TryCancel).
#include "client/lib/observation.h"

#include <thread>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/lib/careful.h"
#include "client/lib/proto_convert.h"
#include "client/lib/steady_wait.h"

namespace turnstile::client::internal {
namespace {

class ObservationImpl final : public Observation {
 public:
  ObservationImpl(std::shared_ptr<v1::LockService::Stub> stub, std::string name,
                  std::function<void(const LockObservation&)> on_state,
                  std::function<void(const absl::Status&)> on_end)
      : stub_(std::move(stub)), name_(std::move(name)), on_state_(std::move(on_state)),
        on_end_(std::move(on_end)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~ObservationImpl() override { Stop(); }
  void Stop() override ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock l(&mu_);
      if (stopped_) return;
      stopped_ = true;
      if (ctx_) ctx_->TryCancel();
      cv_.SignalAll();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    careful::Backoff backoff;
    bool told_unknown = false;
    for (;;) {
      auto ctx = std::make_shared<grpc::ClientContext>();
      {
        absl::MutexLock l(&mu_);
        if (stopped_) return;
        ctx_ = ctx;
      }
      v1::ObserveRequest req;
      req.set_name(name_);
      auto reader = stub_->Observe(ctx.get(), req);
      v1::ObserveEvent ev;
      bool got = false;
      while (reader->Read(&ev)) {
        got = true;
        told_unknown = ev.state() != v1::ObserveEvent::CURRENT;
        LockObservation o;
        o.known = ev.state() == v1::ObserveEvent::CURRENT;
        o.name = ev.name();
        o.waiters = ev.waiters();
        o.max_holders = ev.max_holders();
        o.message = ev.message();
        for (const auto& h : ev.holders()) o.holders.push_back(ConvertContender(h));
        Deliver(o);
      }
      const grpc::Status st = reader->Finish();
      {
        absl::MutexLock l(&mu_);
        ctx_.reset();
        if (stopped_) return;
      }
      const auto code = st.error_code();
      if (code == grpc::StatusCode::INVALID_ARGUMENT ||
          code == grpc::StatusCode::PERMISSION_DENIED ||
          code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::UNIMPLEMENTED) {
        if (on_end_) on_end_(FromGrpc(st));
        return;
      }
      if (got) backoff = careful::Backoff();
      if (!told_unknown) {
        told_unknown = true;
        LockObservation o;
        o.name = name_;
        o.message = "observing again: " + st.error_message();
        Deliver(o);
      }
      // The backoff's pause, cut short by Stop.
      absl::MutexLock l(&mu_);
      const auto deadline = std::chrono::steady_clock::now() + backoff.Next();
      while (!stopped_) {
        if (!WaitBefore(cv_, mu_, deadline)) break;
      }
      if (stopped_) return;
    }
  }
  void Deliver(const LockObservation& o) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock l(&mu_);
      if (stopped_) return;
    }
    on_state_(o);
  }

  const std::shared_ptr<v1::LockService::Stub> stub_;
  const std::string name_;
  const std::function<void(const LockObservation&)> on_state_;
  const std::function<void(const absl::Status&)> on_end_;
  absl::Mutex mu_;
  absl::CondVar cv_;  // on Stop
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<grpc::ClientContext> ctx_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Observation> StartObservation(
    std::shared_ptr<v1::LockService::Stub> stub, std::string name,
    std::function<void(const LockObservation&)> on_state,
    std::function<void(const absl::Status&)> on_end) {
  return std::make_unique<ObservationImpl>(std::move(stub), std::move(name), std::move(on_state),
                                           std::move(on_end));
}

}  // namespace turnstile::client::internal
