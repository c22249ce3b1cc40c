// turnstile C++ client library: see client.h. This file is the facade,
// Client: its channel and stub, Acquire's retries, and the unary calls.
//
// Structure (client/lib/)
//   client.cc         Client (Client::Impl: the channel and stub, the
//                     reentrancy Registry, the KeepAliver and the EventLoop,
//                     the process's one library thread shared by every
//                     Client).
//   hold_core.h       HoldCore: one Acquire stream = one server-side
//                     contender, an AsyncStream (completion-queue API) that
//                     owns the hold's state and keeps itself alive until
//                     OnDone; reentrant handles of one hold share one
//                     HoldCore. The library's lock order is written there.
//   hold_core.cc      its callers' side: the wait for the grant, Release,
//                     the status; AbandonWaits.
//   hold_events.cc    its EventLoop side: stream events, the careful-client
//                     watchdog, delivery of on_change / on_revoke.
//   lock_hold.h,      Lock::Hold, one handle (one Lock object's share of a
//   lock.cc           HoldCore), and Lock.
//   keepalive.h/.cc   KeepAliver: renews the Client's TTL leases over one
//                     KeepAliveStream (an AsyncStream) at a time.
//   reentrancy.h      Registry: (name, owner) -> the reentrant hold.
//   observation.h/.cc Client::Observe's thread.
//   proto_convert.h/.cc  status, duration and contender conversions.
//   steady_wait.h     a CondVar wait bounded by the steady clock.
//   event_loop.h/.cc, async_stream.h  the loop thread and its streams.
//   careful.h         the pure clock rules (watchdog, backoff, options).
//   coordination.h/.cc  Election, multi-lock (public API over Client).
//   tls.h/.cc         channel credentials.
//
// Threads
//   - A hold costs no thread. One EventLoop thread per process (shared by
//     every Client: more pollers would hand gRPC's poller to each other on
//     every event, event_loop.h) polls the completion queue of all streams
//     (async_stream.h): stream events only update state and queue work
//     there, never wait and never run user code. The same thread runs every
//     timer (each hold's careful-client watchdog, the KeepAlive schedules)
//     and delivers on_change and on_revoke, never under an internal lock.
//     Notifications of one hold are queued and delivered in order. No gRPC
//     callback API anywhere: it would bring gRPC's two "nexting" threads
//     into the process, and a context switch between them on every event.
//   - Acquire opens the stream on the caller's thread, waits for the grant
//     on a condition variable (bounded), and calls on_queued on the caller's
//     thread, so every on_queued call happens before Acquire returns.
//     Release writes on the caller's thread too; other calls (Release and
//     Revoke by lease id) are blocking unary calls.
//   - Every lock here is an absl::Mutex whose guarded state clang checks
//     (-Wthread-safety, tests/thread_safety_check.sh); the order is in
//     hold_core.h. State that only the EventLoop's thread touches has no
//     lock (a KeepAliveStream's send times).
#include "client/lib/client.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "client/lib/careful.h"
#include "client/lib/coordination.h"  // WaitsAbandoned
#include "client/lib/event_loop.h"
#include "client/lib/hold_core.h"
#include "client/lib/keepalive.h"
#include "client/lib/lock_hold.h"
#include "client/lib/observation.h"
#include "client/lib/proto_convert.h"
#include "client/lib/reentrancy.h"
#include "client/lib/tls.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile::client {

using internal::FromGrpc;
using internal::HoldCore;
using internal::SetDuration;

const char* LockStateName(LockState s) {
  switch (s) {
    case LockState::kHeld: return "HELD";
    case LockState::kSuspended: return "SUSPENDED";
    case LockState::kLost: return "LOST";
    case LockState::kReleased: return "RELEASED";
  }
  return "UNKNOWN";
}

namespace {

// Deadline of unary calls (Release by lease id, Revoke, Describe, ...).
constexpr Millis kUnaryTimeout{10000};

}  // namespace

class Client::Impl {
 public:
  ~Impl() {
    if (keepaliver) keepaliver->Shutdown();
  }
  ClientOptions options;
  std::shared_ptr<v1::LockService::Stub> stub;
  std::shared_ptr<EventLoop> loop;
  std::shared_ptr<internal::KeepAliver> keepaliver;
  std::shared_ptr<internal::Registry> registry;
};

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("target: empty");
  TlsFiles tls{options.tls_ca_file, options.tls_cert_file, options.tls_key_file};
  if (tls.empty()) tls = TlsFiles::FromEnv();
  auto creds = MakeChannelCredentials(tls);
  if (!creds.ok()) return creds.status();
  grpc::ChannelArguments args;
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->stub = std::shared_ptr<v1::LockService::Stub>(
      v1::LockService::NewStub(grpc::CreateCustomChannel(options.target, *creds, args)));
  impl->loop = SharedEventLoop();
  impl->keepaliver = std::make_shared<internal::KeepAliver>(impl->stub, impl->loop);
  impl->registry = std::make_shared<internal::Registry>();
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<Lock> Client::Acquire(const std::string& name, const AcquireOptions& options) {
  Impl& im = *impl_;
  const std::string owner = options.owner.empty() ? im.options.default_owner : options.owner;
  // Lock names cannot contain NUL (a control character), so the key is unique.
  const std::string key = options.reentrant ? name + std::string(1, '\0') + owner : "";
  if (options.reentrant) {
    if (std::shared_ptr<HoldCore> core = im.registry->Find(key)) {
      int id = core->TryAddHandle(options.on_change);
      if (id >= 0) return Lock(std::make_shared<Lock::Hold>(std::move(core), id));
    }
  }

  v1::AcquireOpen open;
  open.set_name(name);
  open.set_owner(owner);
  SetDuration(options.wait_timeout, open.mutable_wait_timeout());
  SetDuration(options.ttl, open.mutable_ttl());
  open.mutable_metadata()->insert(options.metadata.begin(), options.metadata.end());
  if (options.max_holders > 0) {
    // With `shared` too, the server refuses the mix (INVALID_ARGUMENT).
    open.set_kind(options.shared ? v1::LOCK_KIND_SHARED : v1::LOCK_KIND_SEMAPHORE);
    open.set_max_holders(options.max_holders);
  } else {
    open.set_kind(options.shared ? v1::LOCK_KIND_SHARED : v1::LOCK_KIND_EXCLUSIVE);
  }
  SetDuration(options.lock_delay, open.mutable_lock_delay());
  open.set_revoke_holders(options.revoke_holders);
  open.set_revoke_reason(options.revoke_reason);

  // A wait that ends UNAVAILABLE (the replica is draining, lost ZooKeeper,
  // or cannot be reached; or CANCELLED by a replica shutting down) is
  // opened again until the wait timeout, with
  // backoff: through a load-balanced target the retry reaches another
  // replica, so rolling restarts do not fail waiters. The retry queues anew
  // (the old replica deleted its node, or its session will). Try-once
  // (wait_timeout 0) is not retried.
  if (absl::Status s = careful::ValidateAcquireOptions(name, options); !s.ok()) return s;
  const auto deadline = std::chrono::steady_clock::now() + options.wait_timeout;
  careful::Backoff backoff;
  std::shared_ptr<HoldCore> core;
  for (;;) {
    if (WaitsAbandoned()) {
      return absl::CancelledError("waits for locks were abandoned in this process (AbandonWaits)");
    }
    // Rounded up: truncated, the server's wait would end (up to 1 ms) before
    // the caller's wait_timeout has passed.
    Millis remaining = std::chrono::ceil<Millis>(deadline - std::chrono::steady_clock::now());
    if (options.wait_timeout > Millis(0)) {
      remaining = std::max(remaining, Millis(1));
      SetDuration(remaining, open.mutable_wait_timeout());
    } else {
      remaining = Millis(0);
    }
    core = std::make_shared<HoldCore>(im.stub, im.loop, im.keepaliver, im.registry, name, key,
                                      options.ttl, options.on_change, options.on_revoke);
    absl::Status st = core->Start(open, remaining, options.on_queued);
    if (st.ok()) break;
    if (WaitsAbandoned()) return st;  // not retried
    // CANCELLED cannot come from the caller here (Acquire blocks): it is a
    // replica shutting down and cancelling the calls it still has.
    const Millis delay = backoff.Next();
    if (!careful::MayRetry(st, im.options.retry_unavailable, options.wait_timeout,
                           std::chrono::steady_clock::now(), delay, deadline)) {
      return st;
    }
    std::this_thread::sleep_for(delay);  // retry backoff, bounded by the deadline
  }
  if (options.ttl > Millis(0)) im.keepaliver->Add(core->lease_id(), options.ttl, core);
  if (options.reentrant) im.registry->Put(key, core);
  return Lock(std::make_shared<Lock::Hold>(std::move(core), 0));
}

absl::Status Client::Release(const std::string& lease_id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  v1::ReleaseRequest req;
  req.set_lease_id(lease_id);
  v1::ReleaseResponse resp;
  return FromGrpc(impl_->stub->Release(&ctx, req, &resp));
}

absl::Status Client::Revoke(const std::string& lease_id, const std::string& reason) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  v1::RevokeRequest req;
  req.set_lease_id(lease_id);
  req.set_requester(impl_->options.default_owner);
  req.set_reason(reason);
  v1::RevokeResponse resp;
  return FromGrpc(impl_->stub->Revoke(&ctx, req, &resp));
}

absl::Status Client::Proclaim(const std::string& lease_id, uint64_t fencing_token,
                              const std::map<std::string, std::string>& metadata) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  v1::ProclaimRequest req;
  req.set_lease_id(lease_id);
  req.set_fencing_token(fencing_token);
  req.mutable_metadata()->insert(metadata.begin(), metadata.end());
  v1::ProclaimResponse resp;
  return FromGrpc(impl_->stub->Proclaim(&ctx, req, &resp));
}

absl::StatusOr<std::unique_ptr<Observation>> Client::Observe(
    const std::string& name, std::function<void(const LockObservation&)> on_state,
    std::function<void(const absl::Status&)> on_end) {
  if (name.empty()) return absl::InvalidArgumentError("name: must not be empty");
  if (!on_state) return absl::InvalidArgumentError("on_state: must be set");
  return internal::StartObservation(impl_->stub, name, std::move(on_state), std::move(on_end));
}

absl::StatusOr<std::optional<Description>> Client::Describe(const std::string& name) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  v1::DescribeRequest req;
  req.set_name(name);
  v1::DescribeResponse resp;
  absl::Status s = FromGrpc(impl_->stub->Describe(&ctx, req, &resp));
  // The server answers NOT_FOUND for a lock with no holders or waiters.
  if (absl::IsNotFound(s)) return std::optional<Description>();
  if (!s.ok()) return s;
  Description d;
  d.name = resp.name();
  d.max_holders = resp.max_holders();
  for (const auto& c : resp.holders()) d.holders.push_back(internal::ConvertContender(c));
  for (const auto& c : resp.waiters()) d.waiters.push_back(internal::ConvertContender(c));
  return std::make_optional(std::move(d));
}

const char* VerdictName(TokenCheck::Verdict verdict) {
  switch (verdict) {
    case TokenCheck::Verdict::kCurrent: return "CURRENT";
    case TokenCheck::Verdict::kSuperseded: return "SUPERSEDED";
    case TokenCheck::Verdict::kWaiting: return "WAITING";
  }
  return "?";
}

absl::StatusOr<TokenCheck> Client::CheckToken(const std::string& name, uint64_t fencing_token,
                                              bool allow_stale) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  v1::CheckTokenRequest req;
  req.set_name(name);
  req.set_fencing_token(fencing_token);
  req.set_allow_stale(allow_stale);
  v1::CheckTokenResponse resp;
  if (absl::Status s = FromGrpc(impl_->stub->CheckToken(&ctx, req, &resp)); !s.ok()) return s;
  TokenCheck c;
  switch (resp.verdict()) {
    case v1::CheckTokenResponse::CURRENT: c.verdict = TokenCheck::Verdict::kCurrent; break;
    case v1::CheckTokenResponse::WAITING: c.verdict = TokenCheck::Verdict::kWaiting; break;
    case v1::CheckTokenResponse::SUPERSEDED: c.verdict = TokenCheck::Verdict::kSuperseded; break;
    default:
      return absl::UnknownError(absl::StrCat("CheckToken: unknown verdict ", resp.verdict()));
  }
  c.highest_holder_token = resp.highest_holder_token();
  c.linearizable = resp.linearizable();
  return c;
}

absl::StatusOr<LockNames> Client::List(const std::string& prefix, int limit) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  v1::ListRequest req;
  req.set_prefix(prefix);
  req.set_limit(limit);
  v1::ListResponse resp;
  if (absl::Status s = FromGrpc(impl_->stub->List(&ctx, req, &resp)); !s.ok()) return s;
  LockNames out;
  out.names.assign(resp.names().begin(), resp.names().end());
  out.truncated = resp.truncated();
  return out;
}

}  // namespace turnstile::client
