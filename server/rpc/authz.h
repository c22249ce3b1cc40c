// Who may take which lock: the authorization policy of --authz-file, and
// the audit log. (Caller identities from verified client certificates:
// server/rpc/client_cert.h.) The decision rules are documented with the file format in
// protos/turnstile/v1/authz.proto; this is their implementation.
#ifndef TURNSTILE_SERVER_RPC_AUTHZ_H_
#define TURNSTILE_SERVER_RPC_AUTHZ_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/rpc/quota.h"
#include "server/watched_file.h"

namespace turnstile {

enum class AuthzAction : uint8_t {
  kAcquire, kDescribe, kList, kRelease, kRevoke, kKeepAlive, kProclaim
};
inline constexpr int kAuthzActionCount = 7;
const char* AuthzActionName(AuthzAction a);

// A parsed policy. Immutable; shared by the calls that started under it.
class AuthzPolicy {
 public:
  // INVALID_ARGUMENT naming the rule and field for anything malformed.
  static absl::StatusOr<std::shared_ptr<const AuthzPolicy>> Parse(absl::string_view json);

  struct Decision {
    bool allowed = false;
    std::string why;  // which rule decided, or "no rule matches"
    bool by_deny_rule = false;  // refused by a deny rule (not by default)
  };
  Decision Check(absl::string_view identity, AuthzAction action, absl::string_view lock) const;
  // Whether some allow rule for `identity` whose prefix extends `prefix`
  // wins at its own prefix, so that a name under `prefix` may be allowed
  // although `prefix` itself is not (List of a partly visible prefix; the
  // names are then checked one by one).
  bool MayAllowUnder(absl::string_view identity, AuthzAction action,
                     absl::string_view prefix) const;
  size_t rule_count() const { return rules_.size(); }
  // The per-identity quotas (server/rpc/quota.h).
  const QuotaSet& quotas() const { return quotas_; }

 private:
  struct Rule {
    std::vector<std::string> identities;
    std::vector<std::string> locks;
    uint32_t actions = 0;  // bit per AuthzAction
    bool deny = false;
    std::string label;     // "rule 3" or "rule 3 (description)"
  };
  std::vector<Rule> rules_;
  // Lock prefix -> the rules naming it (indexes into rules_, ascending).
  absl::flat_hash_map<std::string, std::vector<size_t>> by_prefix_;
  QuotaSet quotas_;
};

// Glob with '*' (any run of characters, '/' included); exact otherwise.
bool IdentityMatches(absl::string_view pattern, absl::string_view identity);
// How specific a pattern is against an identity it matches: exact beats
// every glob (INT_MAX); between globs, more literal characters win.
int IdentitySpecificity(absl::string_view pattern);

// The current policy of a replica, reloaded from its file. Thread-safe.
class PolicyFile {
 public:
  // Loads `path` (an error if it is missing or invalid: a replica does not
  // start with a broken policy). Without `rules_allowed` (no mutual TLS: no
  // verified identities) a file with rules is invalid, at start and at
  // every reload; quotas alone are allowed.
  static absl::StatusOr<std::unique_ptr<PolicyFile>> Load(const std::string& path,
                                                          bool rules_allowed = true);
  std::shared_ptr<const AuthzPolicy> current() const ABSL_LOCKS_EXCLUDED(mu_);
  // Re-reads the file if it changed since the last look (force: even if
  // its stat did not change). An invalid file is logged (never its bytes)
  // and the previous policy stays; returns whether a new policy is now in
  // force.
  bool Reload(bool force) ABSL_LOCKS_EXCLUDED(reload_mu_, mu_);
  const std::string& path() const { return path_; }

 private:
  PolicyFile(std::string path, bool rules_allowed)
      : path_(path), rules_allowed_(rules_allowed), file_(std::move(path)) {}
  // The policy in `text`, or why it is refused.
  absl::StatusOr<std::shared_ptr<const AuthzPolicy>> ParseHere(absl::string_view text) const;
  const std::string path_;
  const bool rules_allowed_;
  // Serializes Reload; taken before mu_.
  absl::Mutex reload_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  WatchedFile file_ ABSL_GUARDED_BY(reload_mu_);
  mutable absl::Mutex mu_;
  std::shared_ptr<const AuthzPolicy> policy_ ABSL_GUARDED_BY(mu_);
};

// One audit line (JSON) on stderr; `extra`: more fields, after "detail".
void AuditLog(absl::string_view event, absl::string_view identity, absl::string_view action,
              absl::string_view lock, absl::string_view detail,
              const std::vector<std::pair<std::string, std::string>>& extra = {});

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RPC_AUTHZ_H_
