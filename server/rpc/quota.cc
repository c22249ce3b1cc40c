#include "server/rpc/quota.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/rpc/authz.h"
#include "turnstile/v1/authz.pb.h"

namespace turnstile {

namespace {

constexpr size_t kMaxQuotaName = 64;
// The most opens per second a quota may name (a bucket refilled faster
// than a replica can open streams is no limit; a typo of 1e9 is caught).
constexpr double kMaxOpensPerSecond = 1e6;

absl::Status CheckName(const std::string& where, const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": \"name\" is empty"));
  if (name.size() > kMaxQuotaName) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": \"name\" is longer than ", kMaxQuotaName, " characters"));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": \"name\" may hold only letters, digits, '_', '.' and '-'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<QuotaLimits> FromQuota(const std::string& where, const v1::Quota& q,
                                      bool is_default) {
  QuotaLimits out;
  out.name = q.name().empty() && is_default ? "default" : q.name();
  if (absl::Status s = CheckName(where, out.name); !s.ok()) return s;
  const std::string label = absl::StrCat(where, " (", out.name, ")");
  if (is_default && q.identities_size() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": the default quota takes no \"identities\" (it applies to every "
                            "identity no quota names)"));
  }
  if (!is_default && q.identities_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": \"identities\" is empty"));
  }
  for (const std::string& id : q.identities()) {
    if (id.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": an empty identity pattern (use \"*\" for anyone)"));
    }
    out.identities.push_back(id);
  }
  const double rate = q.opens_per_second();
  if (!std::isfinite(rate) || rate < 0 || rate > kMaxOpensPerSecond) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": \"opens_per_second\" must be 0 (no limit) .. ", kMaxOpensPerSecond));
  }
  if (q.open_burst() > 0 && rate == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": \"open_burst\" needs \"opens_per_second\""));
  }
  if (q.max_streams() > 0 && q.max_contenders() > q.max_streams()) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": \"max_contenders\" is above \"max_streams\" (every contender is a stream)"));
  }
  out.max_streams = q.max_streams();
  out.max_contenders = q.max_contenders();
  out.opens_per_second = rate;
  out.open_burst = q.open_burst() > 0
                       ? q.open_burst()
                       : static_cast<uint32_t>(std::max(1.0, std::ceil(rate)));
  return out;
}

std::string Plural(uint32_t n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

}  // namespace

const char* QuotaLimitName(QuotaLimit l) {
  switch (l) {
    case QuotaLimit::kStreams: return "streams";
    case QuotaLimit::kContenders: return "contenders";
    case QuotaLimit::kOpens: return "opens";
  }
  return "?";
}

absl::StatusOr<QuotaSet> QuotaSet::FromProto(const v1::AuthzPolicy& msg) {
  QuotaSet set;
  for (int i = 0; i < msg.quotas_size(); ++i) {
    absl::StatusOr<QuotaLimits> q = FromQuota(absl::StrCat("quota ", i + 1), msg.quotas(i), false);
    if (!q.ok()) return q.status();
    for (const QuotaLimits& other : set.quotas_) {
      if (other.name == q->name) {
        return absl::InvalidArgumentError(
            absl::StrCat("quota ", i + 1, ": the name \"", q->name, "\" is used twice"));
      }
    }
    set.quotas_.push_back(std::move(*q));
  }
  if (msg.has_default_quota()) {
    absl::StatusOr<QuotaLimits> q = FromQuota("default_quota", msg.default_quota(), true);
    if (!q.ok()) return q.status();
    for (const QuotaLimits& other : set.quotas_) {
      if (other.name == q->name) {
        return absl::InvalidArgumentError(
            absl::StrCat("default_quota: the name \"", q->name, "\" is used by a quota"));
      }
    }
    set.default_ = std::move(*q);
  }
  return set;
}

uint32_t QuotaSet::StreamBound() const {
  // An identity no quota names falls to the default quota; without one it
  // is unbounded.
  if (!default_ || default_->max_streams == 0) return 0;
  uint32_t bound = default_->max_streams;
  for (const QuotaLimits& q : quotas_) {
    if (q.max_streams == 0) return 0;
    bound = std::max(bound, q.max_streams);
  }
  return bound;
}

const QuotaLimits* QuotaSet::For(absl::string_view identity) const {
  const QuotaLimits* best = nullptr;
  int best_spec = -1;
  for (const QuotaLimits& q : quotas_) {
    for (const std::string& pat : q.identities) {
      if (!IdentityMatches(pat, identity)) continue;
      const int spec = IdentitySpecificity(pat);
      if (spec > best_spec) {  // strictly: the first listed wins a tie
        best = &q;
        best_spec = spec;
      }
    }
  }
  if (best != nullptr) return best;
  return default_ ? &*default_ : nullptr;
}

QuotaTracker::Refusal QuotaTracker::Refuse(Entry& e, const QuotaLimits& q, QuotaLimit limit,
                                           const std::string& identity, uint32_t value,
                                           absl::Time now) {
  Refusal r;
  r.quota = q.name;
  r.limit = limit;
  std::string what;
  switch (limit) {
    case QuotaLimit::kStreams:
      what = absl::StrCat("at most ", Plural(value, "open stream", "open streams"),
                          " (Acquire, Observe and KeepAlive together)");
      break;
    case QuotaLimit::kContenders:
      what = absl::StrCat("at most ", Plural(value, "contender", "contenders"),
                          " (waiting or holding)");
      break;
    case QuotaLimit::kOpens:
      what = absl::StrCat("at most ", q.opens_per_second, " stream opens per second (burst ",
                          q.open_burst, ")");
      break;
  }
  r.status = absl::ResourceExhaustedError(
      absl::StrCat("quota \"", q.name, "\" allows identity \"", identity, "\" ", what,
                   " on this replica; retry later with backoff"));
  if (now - e.last_audit >= absl::Seconds(1)) {
    r.audit = true;
    r.unaudited = e.unaudited;
    e.unaudited = 0;
    e.last_audit = now;
  } else {
    ++e.unaudited;
  }
  return r;
}

std::optional<QuotaTracker::Refusal> QuotaTracker::OpenStream(const QuotaLimits* q,
                                                              const std::string& identity,
                                                              absl::Time now) {
  absl::MutexLock l(&mu_);
  // Identities refused (or idle) with nobody to close a stream of theirs
  // are forgotten in sweeps, so many callers passing by cost no memory.
  if (++opens_ % kSweepEvery == 0) Sweep(now);
  Entry& e = usage_[identity];
  if (q != nullptr && q->opens_per_second > 0) {
    const double burst = q->open_burst;
    if (!e.bucket_set) {
      e.tokens = burst;
      e.bucket_set = true;
    } else {
      // Refill at the rate the tokens were taken at; a reload's new rate
      // applies from now on.
      const double rate = e.rate > 0 ? e.rate : q->opens_per_second;
      e.tokens += absl::ToDoubleSeconds(now - e.refilled) * rate;
    }
    e.tokens = std::min(e.tokens, burst);
    e.refilled = now;
    e.rate = q->opens_per_second;
    e.burst = burst;
    if (e.tokens < 1.0) {
      Refusal r = Refuse(e, *q, QuotaLimit::kOpens, identity, 0, now);
      return r;
    }
  }
  if (q != nullptr && q->max_streams > 0 && e.streams >= q->max_streams) {
    Refusal r = Refuse(e, *q, QuotaLimit::kStreams, identity, q->max_streams, now);
    return r;
  }
  if (q != nullptr && q->opens_per_second > 0) e.tokens -= 1.0;
  ++e.streams;
  return std::nullopt;
}

void QuotaTracker::CloseStream(const std::string& identity, absl::Time now) {
  absl::MutexLock l(&mu_);
  auto it = usage_.find(identity);
  if (it == usage_.end() || it->second.streams == 0) return;
  --it->second.streams;
  MaybeForget(identity, now);
}

std::optional<QuotaTracker::Refusal> QuotaTracker::OpenContender(const QuotaLimits* q,
                                                                 const std::string& identity,
                                                                 absl::Time now) {
  absl::MutexLock l(&mu_);
  Entry& e = usage_[identity];
  if (q != nullptr && q->max_contenders > 0 && e.contenders >= q->max_contenders) {
    Refusal r = Refuse(e, *q, QuotaLimit::kContenders, identity, q->max_contenders, now);
    return r;
  }
  ++e.contenders;
  return std::nullopt;
}

void QuotaTracker::CloseContender(const std::string& identity, absl::Time now) {
  absl::MutexLock l(&mu_);
  auto it = usage_.find(identity);
  if (it == usage_.end() || it->second.contenders == 0) return;
  --it->second.contenders;
  MaybeForget(identity, now);
}

bool QuotaTracker::Idle(const Entry& e, absl::Time now) {
  if (e.streams > 0 || e.contenders > 0) return false;
  const bool full = !e.bucket_set || e.rate <= 0 ||
                    e.tokens + absl::ToDoubleSeconds(now - e.refilled) * e.rate >= e.burst;
  // A refused identity keeps its entry while it is still being refused
  // (its audit pacing), i.e. within a second of its last audit line.
  const bool quiet = now - e.last_audit >= absl::Seconds(1);
  return full && quiet;
}

void QuotaTracker::MaybeForget(const std::string& identity, absl::Time now) {
  auto it = usage_.find(identity);
  if (it != usage_.end() && Idle(it->second, now)) usage_.erase(it);
}

void QuotaTracker::Sweep(absl::Time now) {
  for (auto it = usage_.begin(); it != usage_.end();) {
    if (Idle(it->second, now)) {
      usage_.erase(it++);  // flat_hash_map's erase returns nothing
    } else {
      ++it;
    }
  }
}

QuotaTracker::Usage QuotaTracker::UsageOf(const std::string& identity) const {
  absl::MutexLock l(&mu_);
  auto it = usage_.find(identity);
  if (it == usage_.end()) return {};
  return {it->second.streams, it->second.contenders};
}

size_t QuotaTracker::tracked() const {
  absl::MutexLock l(&mu_);
  return usage_.size();
}

std::string QuotaIdentity(absl::string_view verified, absl::string_view peer) {
  if (!verified.empty()) return std::string(verified);
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    const size_t colon = peer.rfind(':');
    return std::string(colon == absl::string_view::npos ? peer : peer.substr(0, colon));
  }
  if (absl::ConsumePrefix(&peer, "ipv6:")) {
    if (!peer.empty() && peer.front() == '[') {
      const size_t close = peer.find(']');
      if (close != absl::string_view::npos) return std::string(peer.substr(1, close - 1));
    }
    return std::string(peer);
  }
  return std::string(peer);
}

}  // namespace turnstile
