// The KeepAlive stream: renewals of leases by id (server/rpc/lock_service.h).

#include <atomic>
#include <list>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/gather.h"
#include "server/rpc/lock_service.h"
#include "server/rpc/lock_service_internal.h"

namespace turnstile {

using namespace lock_service_internal;  // NOLINT(build/namespaces): the adapter's own helpers

namespace {

class KeepAliveReactor final
    : public StreamReactor<v1::KeepAliveRequest, v1::KeepAliveResponse> {
 public:
  static void Await(LockServiceImpl* svc, v1::LockService::AsyncService* async,
                    grpc::ServerCompletionQueue* cq) {
    auto r = std::shared_ptr<KeepAliveReactor>(new KeepAliveReactor(svc));
    r->weak_self_ = r;
    r->BidiCall::Await(r, [async](grpc::ServerContext* ctx, Stream* stream,
                                  grpc::ServerCompletionQueue* cq, void* tag) {
      async->RequestKeepAlive(ctx, stream, cq, cq, tag);
    }, cq);
  }

  void OnArrival() override { svc_->AwaitKeepAlive(); }
  void OnStart() override {
    identity_ = svc_->Authenticate(context(), "KeepAlive");
    Begin();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      FinishAfterWrites(grpc::Status::OK);
      return;
    }
    // Bad input is INVALID_ARGUMENT whoever asks: checked before the
    // caller's identity and the policy (each lease's id in its own entry).
    const size_t n = static_cast<size_t>(req_.lease_ids_size());
    if (absl::Status valid = LockEngine::ValidateKeepAlive(n, svc_->engine()->options().limits);
        !valid.ok()) {
      FinishAfterWrites(ToGrpc(valid));
      return;
    }
    if (!identity_.ok()) {
      FinishAfterWrites(ToGrpc(identity_.status()));
      return;
    }
    // One request at a time: answers stay in request order. Each lease's
    // answer comes from its shard's loop; the last one sends the response.
    std::weak_ptr<KeepAliveReactor> weak = weak_self_;
    std::vector<std::string> leases(req_.lease_ids().begin(), req_.lease_ids().end());
    auto g = Gather<absl::StatusOr<Millis>>::New(
        n, [weak, leases](std::vector<absl::StatusOr<Millis>> answers) {
          v1::KeepAliveResponse resp;
          for (size_t i = 0; i < answers.size(); ++i) {
            auto* st = resp.add_leases();
            st->set_lease_id(leases[i]);
            st->set_code(static_cast<int32_t>(answers[i].status().code()));
            if (answers[i].ok()) {
              SetDuration(*answers[i], st->mutable_valid_for());
            } else {
              st->set_message(std::string(answers[i].status().message()));
            }
          }
          if (auto r = weak.lock()) {
            r->Send(std::move(resp));
            r->StartRead(&r->req_);
          }
        });
    for (size_t i = 0; i < n; ++i) {
      auto answer = [g, i](absl::StatusOr<Millis> valid) { g->Answer(i, std::move(valid)); };
      const std::string& lease = req_.lease_ids(static_cast<int>(i));
      // A lease the caller may not keep alive gets PERMISSION_DENIED in its
      // own entry; the others in the request are served.
      absl::Status allowed = LockEngine::ValidateLeaseId(lease);
      if (allowed.ok()) allowed = svc_->AuthorizeLease(*identity_, AuthzAction::kKeepAlive, lease);
      if (!allowed.ok()) {
        answer(allowed);
        continue;
      }
      svc_->engine()->KeepAlive(lease, answer);
    }
  }

  void OnCancel() override {
    CancelPause();
    FinishAfterWrites(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    MarkDone();
    if (counted_) {
      svc_->CloseStream();
      svc_->NoteStreams("keepalive", -1);
    }
    quota_.Close();
    BidiCall::OnDone();  // may destroy *this
  }

 private:
  explicit KeepAliveReactor(LockServiceImpl* svc) : svc_(svc) {}
  void OnFinishing(const grpc::Status& s) override {
    svc_->NoteRequest("KeepAlive", s.error_code());
  }
  void Begin() {
    if (absl::Status q = quota_.OpenStream(svc_, context(), identity_, "KeepAlive"); !q.ok()) {
      FinishRefused(svc_, ToGrpc(q));
      return;
    }
    counted_ = svc_->TryOpenStream();
    if (!counted_) {
      quota_.Close();
      FinishAfterWrites(svc_->StreamLimitStatus());
      return;
    }
    svc_->NoteStreams("keepalive", +1);
    StartRead(&req_);
  }

  LockServiceImpl* const svc_;
  std::weak_ptr<KeepAliveReactor> weak_self_;
  absl::StatusOr<std::string> identity_;
  QuotaSlot quota_;  // on the stream's calls (start, done), which gRPC serializes
  bool counted_ = false;
  v1::KeepAliveRequest req_;
};

}  // namespace

void LockServiceImpl::AwaitKeepAlive() { KeepAliveReactor::Await(this, &async_, cq_); }

}  // namespace turnstile
