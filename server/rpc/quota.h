// Per-identity quotas of the policy file (protos/turnstile/v1/authz.proto,
// message Quota): which quota an identity has, and what each identity uses
// on this replica now.
//
// A refusal is decided here before anything reaches the engine, so a
// flooding identity costs the replica a map lookup per refused open and
// ZooKeeper nothing.
#ifndef TURNSTILE_SERVER_RPC_QUOTA_H_
#define TURNSTILE_SERVER_RPC_QUOTA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace turnstile {

namespace v1 {
class AuthzPolicy;
}

// One quota's limits; 0 (or 0.0) is "no limit".
struct QuotaLimits {
  std::string name;
  std::vector<std::string> identities;  // empty for the default quota
  uint32_t max_streams = 0;
  uint32_t max_contenders = 0;
  double opens_per_second = 0;
  uint32_t open_burst = 0;  // resolved: max(1, rate) when the file gave 0
};

// The quotas of one policy. Immutable.
class QuotaSet {
 public:
  // INVALID_ARGUMENT naming the quota ("quota 2", "default_quota") and the
  // field; nothing read from the file is echoed but a valid quota's name.
  static absl::StatusOr<QuotaSet> FromProto(const v1::AuthzPolicy& msg);
  // The quota of `identity`: the most specific pattern match (as rules
  // compare identities), the first listed on a tie, else the default
  // quota; null when neither applies (no limit).
  const QuotaLimits* For(absl::string_view identity) const;
  // The most streams any one identity may hold on a replica under these
  // quotas, or 0 when some identity is unbounded (no default quota, or a
  // quota without max_streams). What --max-streams-per-connection's auto
  // value is derived from.
  uint32_t StreamBound() const;
  size_t size() const { return quotas_.size() + (default_ ? 1 : 0); }

 private:
  std::vector<QuotaLimits> quotas_;
  std::optional<QuotaLimits> default_;
};

// What a refusal names.
enum class QuotaLimit : uint8_t { kStreams, kContenders, kOpens };
const char* QuotaLimitName(QuotaLimit l);  // "streams", "contenders", "opens"

// The usage of every identity on this replica. Thread-safe (calls are
// short: one hash lookup under a mutex taken by nothing else).
class QuotaTracker {
 public:
  struct Refusal {
    std::string quota;
    QuotaLimit limit = QuotaLimit::kStreams;
    absl::Status status;  // RESOURCE_EXHAUSTED naming quota, limit, identity
    // Whether to write an audit line for it now (at most one per identity
    // per second), and how many refusals of this identity went unwritten
    // since the last line.
    bool audit = false;
    uint64_t unaudited = 0;
  };

  // A stream of `identity` opens: takes a token of its opens bucket and a
  // stream slot, or returns why not (nothing counted then). `quota` may be
  // null (no limit: only counted).
  std::optional<Refusal> OpenStream(const QuotaLimits* quota, const std::string& identity,
                                    absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  void CloseStream(const std::string& identity, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // An Acquire stream of `identity` (already counted as a stream) becomes a
  // contender.
  std::optional<Refusal> OpenContender(const QuotaLimits* quota, const std::string& identity,
                                       absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  void CloseContender(const std::string& identity, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  struct Usage {
    uint32_t streams = 0;
    uint32_t contenders = 0;
  };
  Usage UsageOf(const std::string& identity) const ABSL_LOCKS_EXCLUDED(mu_);
  // Identities with an entry (some use, or a bucket still refilling).
  size_t tracked() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    uint32_t streams = 0;
    uint32_t contenders = 0;
    double tokens = 0;         // of the opens bucket, as of `refilled`
    bool bucket_set = false;   // tokens start full at the first open
    absl::Time refilled;
    double rate = 0;           // the bucket's last known rate and size
    double burst = 0;
    absl::Time last_audit = absl::InfinitePast();
    uint64_t unaudited = 0;
  };
  Refusal Refuse(Entry& e, const QuotaLimits& q, QuotaLimit limit, const std::string& identity,
                 uint32_t value, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Uses nothing, its bucket is full and it was not refused this second.
  static bool Idle(const Entry& e, absl::Time now);
  // Drops `identity`'s entry once it is idle.
  void MaybeForget(const std::string& identity, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops every idle entry.
  void Sweep(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr uint64_t kSweepEvery = 4096;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> usage_ ABSL_GUARDED_BY(mu_);
  uint64_t opens_ ABSL_GUARDED_BY(mu_) = 0;
};

// The identity quotas count a caller under: `verified` (mutual TLS) when
// there is one, else the IP address in gRPC's peer string
// ("ipv4:10.1.2.3:5000" -> "10.1.2.3", "ipv6:[::1]:5000" -> "::1"; any
// other form as it is).
std::string QuotaIdentity(absl::string_view verified, absl::string_view peer);

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RPC_QUOTA_H_
