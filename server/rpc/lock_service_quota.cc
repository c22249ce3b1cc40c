// The service's side of per-identity quotas: who a stream counts as, and
// what a refusal says, audits and counts. The counting is QuotaTracker's
// (server/rpc/quota.h).
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/rpc/lock_service.h"

namespace turnstile {

namespace {

// The quota `who` has under the policy in force (null: none, or no
// policy).
const QuotaLimits* QuotaOf(const std::shared_ptr<const AuthzPolicy>& p, const std::string& who) {
  return p == nullptr ? nullptr : p->quotas().For(who);
}

}  // namespace

std::string LockServiceImpl::QuotaIdentityOf(grpc::ServerContext* ctx,
                                             const absl::StatusOr<std::string>& identity) const {
  if (policy_ == nullptr) return "";
  return QuotaIdentity(identity.ok() ? *identity : "", ctx->peer());
}

absl::Status LockServiceImpl::OpenQuotaStream(const std::string& who, const char* method,
                                              bool* counted) {
  *counted = false;
  if (policy_ == nullptr) return absl::OkStatus();
  std::shared_ptr<const AuthzPolicy> p = policy_->current();
  std::optional<QuotaTracker::Refusal> r =
      quota_usage_.OpenStream(QuotaOf(p, who), who, absl::Now());
  if (!r) {
    *counted = true;
    return absl::OkStatus();
  }
  NoteQuotaRefusal(*r, who, method, "");
  return r->status;
}

void LockServiceImpl::CloseQuotaStream(const std::string& who) {
  quota_usage_.CloseStream(who, absl::Now());
}

absl::Status LockServiceImpl::OpenQuotaContender(const std::string& who, absl::string_view lock,
                                                 bool* counted) {
  *counted = false;
  if (policy_ == nullptr) return absl::OkStatus();
  std::shared_ptr<const AuthzPolicy> p = policy_->current();
  std::optional<QuotaTracker::Refusal> r =
      quota_usage_.OpenContender(QuotaOf(p, who), who, absl::Now());
  if (!r) {
    *counted = true;
    return absl::OkStatus();
  }
  NoteQuotaRefusal(*r, who, "Acquire", lock);
  return r->status;
}

void LockServiceImpl::CloseQuotaContender(const std::string& who) {
  quota_usage_.CloseContender(who, absl::Now());
}

void LockServiceImpl::NoteQuotaRefusal(const QuotaTracker::Refusal& r, const std::string& who,
                                       const char* method, absl::string_view lock) const {
  if (observer_) observer_->OnQuotaRefused(r.quota, QuotaLimitName(r.limit));
  if (!r.audit) return;
  std::string detail = absl::StrCat("quota \"", r.quota, "\" (", QuotaLimitName(r.limit), ")");
  if (r.unaudited > 0) {
    absl::StrAppend(&detail, "; ", r.unaudited,
                    " more refusals of this identity since the last line");
  }
  AuditLog("quota_exceeded", who, method, lock, detail);
}

bool LockServiceImpl::TakeRefusalPause(gpr_timespec* deadline) {
  if (refusal_delay_.count() <= 0) return false;
  if (paused_refusals_.fetch_add(1) >= kMaxPausedRefusals) {
    paused_refusals_.fetch_sub(1);
    return false;
  }
  *deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                           gpr_time_from_millis(refusal_delay_.count(), GPR_TIMESPAN));
  if (observer_) observer_->OnRefusalsWaiting(+1);
  return true;
}

absl::Status QuotaSlot::OpenStream(LockServiceImpl* svc, grpc::ServerContext* ctx,
                                   const absl::StatusOr<std::string>& identity,
                                   const char* method) {
  std::string who = svc->QuotaIdentityOf(ctx, identity);
  bool counted = false;
  absl::Status s = svc->OpenQuotaStream(who, method, &counted);
  if (counted) counted_ = std::make_unique<Counted>(Counted{svc, std::move(who)});
  return s;
}

absl::Status QuotaSlot::OpenContender(absl::string_view lock) {
  if (counted_ == nullptr) return absl::OkStatus();
  return counted_->svc->OpenQuotaContender(counted_->who, lock, &counted_->contender);
}

void QuotaSlot::Close() {
  if (counted_ == nullptr) return;
  if (counted_->contender) counted_->svc->CloseQuotaContender(counted_->who);
  counted_->svc->CloseQuotaStream(counted_->who);
  counted_.reset();
}

}  // namespace turnstile
