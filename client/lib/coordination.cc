#include "client/lib/coordination.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/common/duration_text.h"
#include "client/lib/careful.h"

namespace turnstile::client {

namespace {

using SteadyClock = std::chrono::steady_clock;

std::optional<Leader> LeaderOf(const std::vector<Contender>& holders) {
  if (holders.empty()) return std::nullopt;
  const Contender& h = holders.front();
  Leader l;
  auto v = h.metadata.find(kLeaderValueKey);
  if (v != h.metadata.end()) l.value = v->second;
  l.owner = h.owner;
  l.identity = h.identity;
  l.fencing_token = h.fencing_token;
  l.granted_unix_ms = h.granted_unix_ms;
  return l;
}

}  // namespace

// ---- Election ----

Election::Election(Client* client, std::string name, ElectionOptions options)
    : client_(client), name_(std::move(name)), options_(std::move(options)) {}

Election::~Election() { (void)Resign(); }

void Election::Tell(bool leader, const std::string& reason) {
  std::lock_guard<std::recursive_mutex> t(tell_mu_);
  {
    absl::MutexLock l(&mu_);
    if (leader_ == leader) return;
    leader_ = leader;
  }
  if (options_.on_leadership) options_.on_leadership(leader, reason);
}

absl::Status Election::Campaign(const std::string& value, Millis timeout) {
  if (timeout < Millis(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout is ", FormatDuration(timeout), "; it must be >= 0"));
  }
  {
    absl::MutexLock l(&mu_);
    if (lock_) {
      const LockState s = lock_->status().state;
      if (s == LockState::kHeld || s == LockState::kSuspended) {
        return absl::FailedPreconditionError(
            absl::StrCat("already leading election \"", name_, "\" (term ", term_, ")"));
      }
    }
  }
  const bool forever = timeout == Millis::max();
  const auto deadline = forever ? SteadyClock::time_point::max() : SteadyClock::now() + timeout;
  Millis cap(3600 * 1000);  // the replicas' default --max-wait-timeout, until one says less
  careful::Backoff backoff;
  for (;;) {
    AcquireOptions o;
    o.owner = options_.owner;
    o.metadata[kLeaderValueKey] = value;
    o.lock_delay = options_.lock_delay;
    if (timeout == Millis(0)) {
      o.wait_timeout = Millis(0);
    } else {
      const auto now = SteadyClock::now();
      if (!forever && now >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("not elected in election \"", name_, "\" within ", FormatDuration(timeout)));
      }
      const Millis left =
          forever ? cap : std::chrono::ceil<Millis>(deadline - now);
      o.wait_timeout = std::min(left, cap);
    }
    // Every attempt's callbacks name their term; a late callback of an
    // earlier attempt finds another term and is ignored.
    auto term_box = std::make_shared<std::atomic<uint64_t>>(0);
    o.on_change = [this, term_box](const LockStatus& s) { OnChange(term_box->load(), s); };
    o.on_revoke = [this, term_box](const std::string& requester, const std::string& reason) {
      OnRevoke(term_box->load(), requester, reason);
    };
    absl::StatusOr<Lock> got = client_->Acquire(name_, o);
    if (got.ok()) {
      std::lock_guard<std::recursive_mutex> t(tell_mu_);
      LockState now_state;
      {
        absl::MutexLock l(&mu_);
        term_ = got->fencing_token();
        term_box->store(term_);
        lock_.emplace(std::move(*got));
        now_state = lock_->status().state;
      }
      // In doubt already: told when the doubt clears (OnChange).
      if (now_state == LockState::kHeld) Tell(true, "ELECTED");
      return absl::OkStatus();
    }
    const absl::Status& st = got.status();
    if (timeout == Millis(0)) return st;
    if (WaitsAbandoned()) return st;  // AbandonWaits: no new wait
    if (absl::IsDeadlineExceeded(st)) continue;  // a replica's cap, or ours (checked above)
    if (absl::IsInvalidArgument(st)) {
      std::optional<Millis> max = MaxWaitFromError(st);
      if (max && *max > Millis(0) && *max < cap) {
        cap = *max;
        continue;
      }
      return st;
    }
    if (absl::IsResourceExhausted(st) || absl::IsUnavailable(st) || absl::IsCancelled(st)) {
      const Millis delay = backoff.Next();
      if (!forever && SteadyClock::now() + delay >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "not elected in election \"", name_, "\" within ", FormatDuration(timeout),
            " (last: ", st.message(), ")"));
      }
      std::this_thread::sleep_for(delay);  // a retry's backoff, not a wait for an event
      continue;
    }
    return st;
  }
}

void Election::OnChange(uint64_t term, const LockStatus& status) {
  std::lock_guard<std::recursive_mutex> t(tell_mu_);
  {
    absl::MutexLock l(&mu_);
    if (term == 0 || term != term_) return;  // not (yet) this leadership's
  }
  switch (status.state) {
    case LockState::kHeld:
      Tell(true, "RESUMED");
      break;
    case LockState::kSuspended:
      Tell(false, "SUSPENDED");
      break;
    case LockState::kLost:
      Tell(false, absl::StrCat("LOST: ", status.lost_reason));
      break;
    case LockState::kReleased:
      Tell(false, "RELEASED");
      break;
  }
}

void Election::OnRevoke(uint64_t term, const std::string& requester, const std::string& reason) {
  if (!options_.resign_on_revoke && !options_.on_revoke) return;
  std::lock_guard<std::recursive_mutex> t(tell_mu_);
  {
    absl::MutexLock l(&mu_);
    if (term == 0 || term != term_) return;
  }
  if (options_.on_revoke) options_.on_revoke(requester, reason);
  if (!options_.resign_on_revoke) return;
  Tell(false, "REVOKED");
  // lock_ stays put while tell_mu_ is held (Campaign and Resign take it
  // first); mu_ is not held across Release, whose callbacks take it. (The
  // analysis does not follow the pointer out of mu_'s scope: tell_mu_,
  // which it does not see, is what keeps it valid.)
  Lock* lock = nullptr;
  {
    absl::MutexLock l(&mu_);
    if (lock_) lock = &*lock_;
  }
  // From the library's thread: Release sends the release and returns.
  if (lock != nullptr) (void)lock->Release();
}

bool Election::IsLeader() const {
  absl::MutexLock l(&mu_);
  return leader_ && lock_ && lock_->status().state == LockState::kHeld;
}

uint64_t Election::Term() const {
  absl::MutexLock l(&mu_);
  return term_;
}

std::string Election::LeaseId() const {
  absl::MutexLock l(&mu_);
  return lock_ ? lock_->lease_id() : std::string();
}

absl::Status Election::Proclaim(const std::string& value) {
  std::string lease;
  uint64_t term = 0;
  {
    absl::MutexLock l(&mu_);
    const LockState s = lock_ ? lock_->status().state : LockState::kReleased;
    if (s != LockState::kHeld && s != LockState::kSuspended) {
      return absl::FailedPreconditionError(
          absl::StrCat("not leading election \"", name_, "\": nothing to proclaim"));
    }
    lease = lock_->lease_id();
    term = term_;
  }
  return client_->Proclaim(lease, term, {{kLeaderValueKey, value}});
}

absl::Status Election::Resign() {
  std::optional<Lock> lock;
  {
    std::lock_guard<std::recursive_mutex> t(tell_mu_);
    Tell(false, "RESIGNED");
    absl::MutexLock l(&mu_);
    lock = std::move(lock_);
    lock_.reset();
  }
  return lock ? lock->Release() : absl::OkStatus();
}

absl::StatusOr<std::optional<Leader>> CurrentLeader(Client* client, const std::string& name) {
  absl::StatusOr<std::optional<Description>> d = client->Describe(name);
  if (!d.ok()) return d.status();
  if (!d->has_value()) return std::optional<Leader>();
  return LeaderOf((*d)->holders);
}

absl::StatusOr<std::unique_ptr<Observation>> ObserveLeader(
    Client* client, const std::string& name,
    std::function<void(const std::optional<Leader>& leader, bool known)> on_leader) {
  if (!on_leader) return absl::InvalidArgumentError("on_leader: must be set");
  // Only changes of leader, value or knowledge (waiters come and go).
  struct Last {
    bool any = false;
    bool known = false;
    std::optional<Leader> leader;
  };
  auto last = std::make_shared<Last>();  // touched only by the observation's thread
  return client->Observe(name, [last, on_leader](const LockObservation& o) {
    std::optional<Leader> leader = o.known ? LeaderOf(o.holders) : std::nullopt;
    const bool same = last->any && last->known == o.known &&
                      last->leader.has_value() == leader.has_value() &&
                      (!leader || (leader->fencing_token == last->leader->fencing_token &&
                                   leader->value == last->leader->value &&
                                   leader->granted_unix_ms == last->leader->granted_unix_ms));
    if (same) return;
    last->any = true;
    last->known = o.known;
    last->leader = leader;
    on_leader(leader, o.known);
  });
}

// ---- Multi-lock ----

absl::StatusOr<std::vector<std::string>> CanonicalLockOrder(std::vector<std::string> names) {
  if (names.empty()) return absl::InvalidArgumentError("names: at least one lock name is needed");
  for (const auto& n : names) {
    if (n.empty()) return absl::InvalidArgumentError("names: a lock name must not be empty");
  }
  // Byte order (std::string compares chars as unsigned).
  std::sort(names.begin(), names.end());
  auto dup = std::adjacent_find(names.begin(), names.end());
  if (dup != names.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("names: \"", *dup, "\" is listed twice; a multi-lock takes each lock once"));
  }
  return names;
}

std::optional<Millis> MaxWaitFromError(const absl::Status& status) {
  if (!absl::IsInvalidArgument(status)) return std::nullopt;
  const std::string msg(status.message());
  if (msg.rfind("wait_timeout is ", 0) != 0) return std::nullopt;
  // The last "0..": a replica names its limit for people first ("0..1h")
  // and then in milliseconds, in brackets; an older replica only in ms.
  const size_t at = msg.rfind("must be 0..");
  if (at == std::string::npos) return std::nullopt;
  const size_t from = at + 11;
  const size_t ms = msg.find("ms", from);
  if (ms == std::string::npos) return std::nullopt;
  int64_t v = 0;
  if (!absl::SimpleAtoi(msg.substr(from, ms - from), &v) || v < 0) return std::nullopt;
  return Millis(v);
}

std::vector<std::string> MultiLock::names() const {
  std::vector<std::string> out;
  for (const auto& l : locks_) out.push_back(l.name());
  return out;
}

uint64_t MultiLock::fencing_token(const std::string& name) const {
  for (const auto& l : locks_) {
    if (l.name() == name) return l.fencing_token();
  }
  return 0;
}

LockState MultiLock::state() const {
  if (released_) return LockState::kReleased;
  bool suspended = false;
  for (const auto& l : locks_) {
    const LockState s = l.status().state;
    if (s == LockState::kLost || s == LockState::kReleased) return LockState::kLost;
    suspended = suspended || s == LockState::kSuspended;
  }
  return suspended ? LockState::kSuspended : LockState::kHeld;
}

absl::Status MultiLock::Release() {
  if (released_) return absl::OkStatus();
  released_ = true;
  absl::Status first;
  for (auto it = locks_.rbegin(); it != locks_.rend(); ++it) {
    absl::Status s = it->Release();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

absl::StatusOr<MultiLock> AcquireAll(Client* client, const std::vector<std::string>& names,
                                     const AcquireOptions& options) {
  absl::StatusOr<std::vector<std::string>> order = CanonicalLockOrder(names);
  if (!order.ok()) return order.status();
  if (options.wait_timeout < Millis(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "wait_timeout is ", FormatDuration(options.wait_timeout), "; it must be >= 0"));
  }
  const auto deadline = SteadyClock::now() + options.wait_timeout;
  MultiLock m;
  for (const std::string& name : *order) {
    AcquireOptions o = options;
    if (options.wait_timeout > Millis(0)) {
      const auto now = SteadyClock::now();
      o.wait_timeout = std::chrono::ceil<Millis>(deadline - now);
      if (o.wait_timeout <= Millis(0)) {
        (void)m.Release();
        return absl::DeadlineExceededError(absl::StrCat(
            "lock \"", name, "\": the multi-lock's wait_timeout (",
            FormatDuration(options.wait_timeout), ") passed; nothing is held"));
      }
    }
    if (options.on_change) {
      o.on_change = [cb = options.on_change, name](const LockStatus& s) {
        LockStatus t = s;
        t.message = absl::StrCat(name, ": ", s.message);
        cb(t);
      };
    }
    absl::StatusOr<Lock> got = client->Acquire(name, o);
    if (!got.ok()) {
      (void)m.Release();  // everything taken so far, before returning
      return absl::Status(got.status().code(),
                          absl::StrCat("lock \"", name, "\": ", got.status().message(),
                                       "; nothing of the multi-lock is held"));
    }
    m.locks_.push_back(std::move(*got));
  }
  return m;
}

}  // namespace turnstile::client
