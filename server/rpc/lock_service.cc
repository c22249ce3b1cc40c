#include "server/rpc/lock_service.h"

#include "server/rpc/acquire_proto.h"
#include "server/rpc/cert_names.h"
#include "server/rpc/lock_service_internal.h"

#include <atomic>
#include <list>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace turnstile {

using namespace lock_service_internal;  // NOLINT(build/namespaces): the adapter's own helpers

namespace lock_service_internal {

void ToProto(const ContenderView& v, v1::Contender* out) {
  out->set_owner(v.info.owner);
  out->mutable_metadata()->insert(v.info.metadata.begin(), v.info.metadata.end());
  out->mutable_since()->set_seconds(v.since_unix_ms / 1000);
  out->mutable_since()->set_nanos(static_cast<int32_t>((v.since_unix_ms % 1000) * 1000000));
  out->set_fencing_token(v.fencing_token);
  out->set_replica_id(v.info.replica_id);
  out->set_position(v.position);
  switch (v.kind) {
    case ContenderKind::kShared: out->set_kind(v1::LOCK_KIND_SHARED); break;
    case ContenderKind::kSemaphore: out->set_kind(v1::LOCK_KIND_SEMAPHORE); break;
    case ContenderKind::kExclusive: out->set_kind(v1::LOCK_KIND_EXCLUSIVE); break;
  }
  out->set_max_holders(v.max_holders);
  if (v.info.granted_unix_ms > 0) {
    out->mutable_granted()->set_seconds(v.info.granted_unix_ms / 1000);
    out->mutable_granted()->set_nanos(static_cast<int32_t>((v.info.granted_unix_ms % 1000) * 1000000));
  }
  out->set_revoke_requests(v.info.revoke_id);
  out->set_revoke_requester(v.info.revoke_by);
  out->set_revoke_reason(v.info.revoke_reason);
  out->set_identity(v.info.identity);
}

}  // namespace lock_service_internal


absl::StatusOr<std::string> LockServiceImpl::Authenticate(grpc::ServerContext* ctx,
                                                         const char* method) const {
  if (verifier_ == nullptr) return std::string();
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  absl::StatusOr<std::string> who =
      auth ? verifier_->Identify(*auth)
           : absl::StatusOr<std::string>(absl::UnauthenticatedError("no TLS connection"));
  if (!who.ok()) {
    // "identity" stays empty: only a verified certificate names one. The
    // refused certificate's names are fields of their own (cert_names.h).
    AuditLog("unauthenticated", "", method, "",
             absl::StrCat(ctx->peer(), ": ", who.status().message()),
             RefusedCertificateAuditFields(who.status()));
  }
  return who;
}

absl::Status LockServiceImpl::Authorize(const std::string& identity, AuthzAction action,
                                        absl::string_view lock) const {
  std::shared_ptr<const AuthzPolicy> p = policy();
  if (p == nullptr) return absl::OkStatus();
  AuthzPolicy::Decision d = p->Check(identity, action, lock);
  if (d.allowed) return absl::OkStatus();
  AuditLog("denied", identity, AuthzActionName(action), lock, d.why);
  return absl::PermissionDeniedError(absl::StrCat("identity \"", identity, "\" may not ",
                                                  AuthzActionName(action), " lock \"", lock,
                                                  "\" (", d.why, ")"));
}

absl::Status LockServiceImpl::AuthorizeLease(const std::string& identity, AuthzAction action,
                                             const std::string& lease_id) const {
  if (policy() == nullptr) return absl::OkStatus();
  absl::StatusOr<LeaseId> lease = ParseLeaseId(lease_id);
  if (!lease.ok()) return lease.status();  // INVALID_ARGUMENT, before any check
  return Authorize(identity, action, lease->lock_name);
}

grpc::Status LockServiceImpl::StreamLimitStatus() const {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat("too many open streams on this replica: the limit "
                                   "(--max-streams) is ",
                                   max_streams_));
}

bool LockServiceImpl::TryOpenStream() {
  size_t n = open_streams_.fetch_add(1);
  if (n >= max_streams_) {
    open_streams_.fetch_sub(1);
    return false;
  }
  return true;
}

void LockServiceImpl::Start(grpc::ServerCompletionQueue* cq) {
  cq_ = cq;
  AwaitAcquire();
  AwaitKeepAlive();
  auto* async = &async_;
  ReleaseCall::Await(
      [async](grpc::ServerContext* ctx, v1::ReleaseRequest* req, ReleaseCall::Responder* r,
              grpc::ServerCompletionQueue* cq, void* tag) {
        async->RequestRelease(ctx, req, r, cq, cq, tag);
      },
      cq, [this](ReleaseCall* call) { Release(call); });
  RevokeCall::Await(
      [async](grpc::ServerContext* ctx, v1::RevokeRequest* req, RevokeCall::Responder* r,
              grpc::ServerCompletionQueue* cq, void* tag) {
        async->RequestRevoke(ctx, req, r, cq, cq, tag);
      },
      cq, [this](RevokeCall* call) { Revoke(call); });
  DescribeCall::Await(
      [async](grpc::ServerContext* ctx, v1::DescribeRequest* req, DescribeCall::Responder* r,
              grpc::ServerCompletionQueue* cq, void* tag) {
        async->RequestDescribe(ctx, req, r, cq, cq, tag);
      },
      cq, [this](DescribeCall* call) { Describe(call); });
  ListCall::Await(
      [async](grpc::ServerContext* ctx, v1::ListRequest* req, ListCall::Responder* r,
              grpc::ServerCompletionQueue* cq, void* tag) {
        async->RequestList(ctx, req, r, cq, cq, tag);
      },
      cq, [this](ListCall* call) { List(call); });
  ProclaimCall::Await(
      [async](grpc::ServerContext* ctx, v1::ProclaimRequest* req, ProclaimCall::Responder* r,
              grpc::ServerCompletionQueue* cq, void* tag) {
        async->RequestProclaim(ctx, req, r, cq, cq, tag);
      },
      cq, [this](ProclaimCall* call) { Proclaim(call); });
  CheckTokenCall::Await(
      [async](grpc::ServerContext* ctx, v1::CheckTokenRequest* req, CheckTokenCall::Responder* r,
              grpc::ServerCompletionQueue* cq, void* tag) {
        async->RequestCheckToken(ctx, req, r, cq, cq, tag);
      },
      cq, [this](CheckTokenCall* call) { CheckToken(call); });
  AwaitObserve();
}


void LockServiceImpl::Proclaim(ProclaimCall* call) {
  ProclaimCall* reactor = call;
  const v1::ProclaimRequest* req = &call->request();
  std::map<std::string, std::string> metadata(req->metadata().begin(), req->metadata().end());
  // Bad input is INVALID_ARGUMENT whoever asks: checked before the policy.
  if (Refused(reactor, "Proclaim",
              LockEngine::ValidateProclaim(req->lease_id(), req->fencing_token(), metadata,
                                           engine_->options().limits))) {
    return;
  }
  absl::StatusOr<std::string> who = Authenticate(call->context(), "Proclaim");
  absl::Status allowed =
      who.ok() ? AuthorizeLease(*who, AuthzAction::kProclaim, req->lease_id()) : who.status();
  if (Refused(reactor, "Proclaim", allowed)) return;
  engine_->Proclaim(req->lease_id(), req->fencing_token(), metadata,
                    [this, reactor](absl::Status s) {
                      grpc::Status g = ToGrpc(s);
                      NoteRequest("Proclaim", g.error_code());
                      reactor->Finish(g);
                    });
}


void LockServiceImpl::Release(ReleaseCall* call) {
  ReleaseCall* reactor = call;
  const v1::ReleaseRequest* req = &call->request();
  if (Refused(reactor, "Release", LockEngine::ValidateLeaseId(req->lease_id()))) return;
  absl::StatusOr<std::string> who = Authenticate(call->context(), "Release");
  absl::Status allowed =
      who.ok() ? AuthorizeLease(*who, AuthzAction::kRelease, req->lease_id()) : who.status();
  if (Refused(reactor, "Release", allowed)) return;
  engine_->ReleaseLease(req->lease_id(), [this, reactor, who = *who, lease = req->lease_id()](
                                             absl::Status s, const std::string& holder) {
    // A hold ended by someone else than its holder: audited.
    if (s.ok() && verifier_ != nullptr && holder != who) {
      AuditLog("release_by_other", who, "release", lease, absl::StrCat("holder ", holder));
    }
    grpc::Status g = ToGrpc(s);
    NoteRequest("Release", g.error_code());
    reactor->Finish(g);
  });
}

void LockServiceImpl::Revoke(RevokeCall* call) {
  RevokeCall* reactor = call;
  const v1::RevokeRequest* req = &call->request();
  if (Refused(reactor, "Revoke",
              LockEngine::ValidateRevoke(req->lease_id(), req->requester(), req->reason(),
                                         engine_->options().limits))) {
    return;
  }
  absl::StatusOr<std::string> who = Authenticate(call->context(), "Revoke");
  absl::Status allowed =
      who.ok() ? AuthorizeLease(*who, AuthzAction::kRevoke, req->lease_id()) : who.status();
  if (Refused(reactor, "Revoke", allowed)) return;
  engine_->Revoke(req->lease_id(), req->requester(), req->reason(),
                  [this, reactor, who = *who, lease = req->lease_id()](
                      absl::Status s, const std::string& holder) {
                    if (s.ok() && verifier_ != nullptr && holder != who) {
                      AuditLog("revoke_by_other", who, "revoke", lease,
                               absl::StrCat("holder ", holder));
                    }
                    grpc::Status g = ToGrpc(s);
                    NoteRequest("Revoke", g.error_code());
                    reactor->Finish(g);
                  },
                  *who);
}

void LockServiceImpl::Describe(DescribeCall* call) {
  DescribeCall* reactor = call;
  const v1::DescribeRequest* req = &call->request();
  v1::DescribeResponse* resp = call->response();
  if (Refused(reactor, "Describe", ValidateLockName(req->name()))) return;
  absl::StatusOr<std::string> who = Authenticate(call->context(), "Describe");
  absl::Status allowed =
      who.ok() ? Authorize(*who, AuthzAction::kDescribe, req->name()) : who.status();
  if (Refused(reactor, "Describe", allowed)) return;
  engine_->Describe(req->name(), [this, reactor, resp](absl::StatusOr<LockDescription> d) {
    if (!d.ok()) {
      grpc::Status g = ToGrpc(d.status());
      NoteRequest("Describe", g.error_code());
      return reactor->Finish(g);
    }
    resp->set_name(d->name);
    resp->set_max_holders(d->max_holders);
    if (d->delayed_until_unix_ms > 0) {
      resp->mutable_delayed_until()->set_seconds(d->delayed_until_unix_ms / 1000);
      resp->mutable_delayed_until()->set_nanos(
          static_cast<int32_t>((d->delayed_until_unix_ms % 1000) * 1000000));
    }
    for (const auto& h : d->holders) ToProto(h, resp->add_holders());
    for (const auto& w : d->waiters) ToProto(w, resp->add_waiters());
    NoteRequest("Describe", grpc::StatusCode::OK);
    reactor->Finish(grpc::Status::OK);
  });
}

void LockServiceImpl::CheckToken(CheckTokenCall* call) {
  CheckTokenCall* reactor = call;
  const v1::CheckTokenRequest* req = &call->request();
  v1::CheckTokenResponse* resp = call->response();
  if (Refused(reactor, "CheckToken",
              LockEngine::ValidateCheckToken(req->name(), req->fencing_token()))) {
    return;
  }
  absl::StatusOr<std::string> who = Authenticate(call->context(), "CheckToken");
  absl::Status allowed =
      who.ok() ? Authorize(*who, AuthzAction::kDescribe, req->name()) : who.status();
  if (Refused(reactor, "CheckToken", allowed)) return;
  engine_->CheckToken(req->name(), req->fencing_token(), req->allow_stale(),
                      [this, reactor, resp](absl::StatusOr<TokenCheck> c) {
                        if (!c.ok()) {
                          grpc::Status g = ToGrpc(c.status());
                          NoteRequest("CheckToken", g.error_code());
                          return reactor->Finish(g);
                        }
                        switch (c->verdict) {
                          case TokenCheck::Verdict::kCurrent:
                            resp->set_verdict(v1::CheckTokenResponse::CURRENT);
                            break;
                          case TokenCheck::Verdict::kSuperseded:
                            resp->set_verdict(v1::CheckTokenResponse::SUPERSEDED);
                            break;
                          case TokenCheck::Verdict::kWaiting:
                            resp->set_verdict(v1::CheckTokenResponse::WAITING);
                            break;
                        }
                        resp->set_highest_holder_token(c->highest_holder_token);
                        resp->set_linearizable(c->linearizable);
                        NoteRequest("CheckToken", grpc::StatusCode::OK);
                        reactor->Finish(grpc::Status::OK);
                      });
}

void LockServiceImpl::List(ListCall* call) {
  ListCall* reactor = call;
  const v1::ListRequest* req = &call->request();
  v1::ListResponse* resp = call->response();
  if (Refused(reactor, "List", LockEngine::ValidateList(req->prefix(), req->limit()))) return;
  absl::StatusOr<std::string> who = Authenticate(call->context(), "List");
  std::shared_ptr<const AuthzPolicy> policy = this->policy();
  absl::Status allowed = who.status();
  if (who.ok() && policy != nullptr) {
    // Decided for the prefix by the rule that wins there, like every other
    // action: a deny rule refuses (audited) however many names would be
    // visible; a prefix no rule allows is refused unless a more specific
    // rule allows part of it (then the names are filtered one by one).
    AuthzPolicy::Decision d = policy->Check(*who, AuthzAction::kList, req->prefix());
    if (d.by_deny_rule ||
        (!d.allowed && !policy->MayAllowUnder(*who, AuthzAction::kList, req->prefix()))) {
      allowed = Authorize(*who, AuthzAction::kList, req->prefix());
    }
  }
  if (Refused(reactor, "List", allowed)) return;
  // Only the names the caller may list, filtered before the limit applies
  // (not audited one by one: a filtered name is not a refused call).
  std::function<bool(const std::string&)> visible;
  if (policy != nullptr) {
    visible = [policy, who = *who](const std::string& n) {
      return policy->Check(who, AuthzAction::kList, n).allowed;
    };
  }
  engine_->List(req->prefix(), req->limit(), [this, reactor, resp](absl::StatusOr<LockList> l) {
    if (!l.ok()) {
      grpc::Status g = ToGrpc(l.status());
      NoteRequest("List", g.error_code());
      return reactor->Finish(g);
    }
    for (auto& n : l->names) resp->add_names(n);
    resp->set_truncated(l->truncated);
    NoteRequest("List", grpc::StatusCode::OK);
    reactor->Finish(grpc::Status::OK);
  }, std::move(visible));
}

}  // namespace turnstile
