#include "tests/bad_input.h"

#include <chrono>
#include <memory>

#include <google/protobuf/descriptor.h>

#include "absl/strings/str_format.h"
#include "client/common/lock_name.h"
#include "server/recipe/lock_name.h"

namespace turnstile::testing {
namespace {

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

// Writes one open and reads until the server ends the stream.
grpc::Status AcquireWith(v1::LockService::Stub* stub, const v1::AcquireOpen& open) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  auto rw = stub->Acquire(&ctx);
  v1::AcquireRequest req;
  *req.mutable_open() = open;
  rw->Write(req);
  rw->WritesDone();
  v1::AcquireEvent ev;
  while (rw->Read(&ev)) {
  }
  return rw->Finish();
}

v1::AcquireOpen Open(const std::string& name) {
  v1::AcquireOpen open;
  open.set_name(name);
  open.set_owner("bad-input-test");
  return open;
}

// The stream's status, or the first entry's code if the stream was fine.
grpc::Status KeepAliveWith(v1::LockService::Stub* stub, const std::vector<std::string>& ids) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  auto rw = stub->KeepAlive(&ctx);
  v1::KeepAliveRequest req;
  for (const auto& id : ids) req.add_lease_ids(id);
  rw->Write(req);
  rw->WritesDone();
  v1::KeepAliveResponse resp;
  grpc::Status entry = grpc::Status::OK;
  bool first = true;
  while (rw->Read(&resp)) {
    if (first && resp.leases_size() > 0) {
      entry = grpc::Status(static_cast<grpc::StatusCode>(resp.leases(0).code()),
                           resp.leases(0).message());
      first = false;
    }
  }
  grpc::Status st = rw->Finish();
  return st.ok() ? entry : st;
}

grpc::Status ObserveWith(v1::LockService::Stub* stub, const std::string& name) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::ObserveRequest req;
  req.set_name(name);
  auto r = stub->Observe(&ctx, req);
  v1::ObserveEvent ev;
  // A valid name would stream until the deadline: the first event is
  // enough to know the call was not refused.
  if (r->Read(&ev)) {
    ctx.TryCancel();
    r->Finish();
    return grpc::Status::OK;
  }
  return r->Finish();
}

template <typename Req, typename Resp>
using Unary = grpc::Status (v1::LockService::Stub::*)(grpc::ClientContext*, const Req&, Resp*);

template <typename Req, typename Resp>
std::function<grpc::Status(v1::LockService::Stub*)> UnaryCall(Unary<Req, Resp> method, Req req) {
  return [method, req](v1::LockService::Stub* stub) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    Resp resp;
    return (stub->*method)(&ctx, req, &resp);
  };
}

}  // namespace

std::vector<BadInputCall> BadInputCalls(const std::string& lock) {
  // Well-formed, for `lock`, naming a node that never existed.
  const std::string lease = FormatLeaseId(EncodeLockName(lock), "x-0123456789abcdef-0000000001");
  std::vector<BadInputCall> out;
  auto acquire = [&out](std::string what, v1::AcquireOpen open) {
    out.push_back({"Acquire", std::move(what),
                   [open](v1::LockService::Stub* s) { return AcquireWith(s, open); }});
  };
  acquire("empty name", Open(""));
  acquire("name with a control character", Open("ctl\x01"));
  {
    v1::AcquireOpen o = Open(lock);
    o.set_owner(std::string(1000, 'o'));
    acquire("owner of 1,000 bytes", o);
  }
  {
    v1::AcquireOpen o = Open(lock);
    o.mutable_wait_timeout()->set_seconds(-1);
    acquire("negative wait_timeout", o);
  }
  {
    v1::AcquireOpen o = Open(lock);
    o.set_max_holders(3);
    o.set_kind(v1::LOCK_KIND_EXCLUSIVE);
    acquire("max_holders on an exclusive lock", o);
  }

  v1::ReleaseRequest release;
  release.set_lease_id("no-slash");
  out.push_back({"Release", "lease id without '/'", UnaryCall(&v1::LockService::Stub::Release, release)});
  release.set_lease_id("");
  out.push_back({"Release", "empty lease id", UnaryCall(&v1::LockService::Stub::Release, release)});

  out.push_back({"KeepAlive", "no lease ids",
                 [](v1::LockService::Stub* s) { return KeepAliveWith(s, {}); }});
  out.push_back({"KeepAlive", "malformed lease id",
                 [](v1::LockService::Stub* s) { return KeepAliveWith(s, {"no-slash"}); }});

  v1::DescribeRequest describe;
  describe.set_name("");
  out.push_back({"Describe", "empty name", UnaryCall(&v1::LockService::Stub::Describe, describe)});
  describe.set_name(std::string(kMaxLockNameBytes + 1, 'n'));
  out.push_back({"Describe", "name over the limit",
                 UnaryCall(&v1::LockService::Stub::Describe, describe)});

  v1::ListRequest list;
  list.set_prefix(lock);
  list.set_limit(-1);
  out.push_back({"List", "limit -1", UnaryCall(&v1::LockService::Stub::List, list)});
  list.set_limit(0);
  list.set_prefix(std::string(kMaxLockNameBytes + 1, 'p'));
  out.push_back({"List", "prefix over the limit", UnaryCall(&v1::LockService::Stub::List, list)});

  v1::RevokeRequest revoke;
  revoke.set_lease_id("no-slash");
  out.push_back({"Revoke", "lease id without '/'", UnaryCall(&v1::LockService::Stub::Revoke, revoke)});
  revoke.set_lease_id(lease);
  revoke.set_reason(std::string(1000, 'r'));
  out.push_back({"Revoke", "reason of 1,000 bytes",
                 UnaryCall(&v1::LockService::Stub::Revoke, revoke)});

  out.push_back({"Observe", "empty name",
                 [](v1::LockService::Stub* s) { return ObserveWith(s, ""); }});

  v1::ProclaimRequest proclaim;
  proclaim.set_lease_id(lease);
  proclaim.set_fencing_token(0);
  out.push_back({"Proclaim", "fencing_token 0",
                 UnaryCall(&v1::LockService::Stub::Proclaim, proclaim)});
  proclaim.set_fencing_token(5);
  (*proclaim.mutable_metadata())[""] = "empty key";
  out.push_back({"Proclaim", "empty metadata key",
                 UnaryCall(&v1::LockService::Stub::Proclaim, proclaim)});

  v1::CheckTokenRequest check;
  check.set_name("");
  check.set_fencing_token(5);
  out.push_back({"CheckToken", "empty name",
                 UnaryCall(&v1::LockService::Stub::CheckToken, check)});
  check.set_name(lock);
  check.set_fencing_token(0);
  out.push_back({"CheckToken", "fencing_token 0",
                 UnaryCall(&v1::LockService::Stub::CheckToken, check)});
  return out;
}

std::vector<std::string> LockServiceMethods() {
  const google::protobuf::ServiceDescriptor* svc =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          "turnstile.v1.LockService");
  std::vector<std::string> out;
  if (svc == nullptr) return out;
  for (int i = 0; i < svc->method_count(); ++i) out.push_back(svc->method(i)->name());
  return out;
}

}  // namespace turnstile::testing
