#include "server/rpc/authz.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <tuple>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/json_quote.h"
#include "turnstile/v1/authz.pb.h"

namespace turnstile {

namespace {

constexpr const char* kActionNames[kAuthzActionCount] = {"acquire", "describe", "list",
                                                         "release", "revoke", "keepalive",
                                                         "proclaim"};
constexpr uint32_t kAllActions = (1u << kAuthzActionCount) - 1;

// protobuf's JSON errors quote the input: a syntax error ends with about 20
// bytes either side of the error and a caret line, a field error names the
// field, a value error the value. A file given by mistake (a ZooKeeper
// digest "digest:user:PASSWORD", a key) must not reach a log that way, so
// only the kind of error and where it is are kept: the byte offset, line and
// column for a syntax error (found by locating the quoted context in the
// input), the field path for the others.
std::string DescribeJsonError(absl::string_view json, const std::string& pb) {
  const size_t nl = pb.find('\n');
  if (nl != std::string::npos) {
    const std::string message = pb.substr(0, nl);
    const size_t last_nl = pb.rfind('\n');
    std::string where = "at an unknown position";
    if (last_nl > nl) {
      const std::string context = pb.substr(nl + 1, last_nl - nl - 1);
      const size_t caret = pb.size() - last_nl - 2;  // spaces before '^'
      const size_t at = json.find(context);
      if (at != absl::string_view::npos && caret <= context.size()) {
        const size_t offset = at + caret;
        const size_t line = 1 + std::count(json.begin(), json.begin() + offset, '\n');
        const size_t line_start = json.rfind('\n', offset == 0 ? 0 : offset - 1);
        const size_t column =
            offset - (line_start == absl::string_view::npos || offset == 0 ? 0 : line_start + 1) + 1;
        where = absl::StrCat("at byte offset ", offset, " (line ", line, ", column ", column, ")");
      }
    }
    // The parser's own sentence ("Unexpected token.") quotes nothing; keep
    // it only if it has no quote, to be sure.
    const bool plain = message.find_first_of("\"'`") == std::string::npos && message.size() < 80;
    return absl::StrCat("syntax error ", where, plain ? absl::StrCat(": ", message) : "");
  }
  // "(rules[0].identities): invalid value 5 for type TYPE_STRING",
  // "(rules[0]) name: Cannot find field.", "name: Cannot find field."
  std::string path;
  if (!pb.empty() && pb[0] == '(') {
    const size_t close = pb.find(')');
    if (close != std::string::npos) path = pb.substr(1, close - 1);
  }
  const bool path_is_plain = path.find_first_of("\"'` ") == std::string::npos && path.size() < 80;
  const std::string in = path.empty() || !path_is_plain ? "at the top level" : "in " + path;
  if (absl::StrContains(pb, "Cannot find field")) {
    return absl::StrCat("an unknown field ", in,
                        " (known: rules, quotas, default_quota; in a rule: identities, locks, "
                        "actions, admin, deny, description; in a quota: name, identities, "
                        "max_streams, max_contenders, opens_per_second, open_burst, "
                        "description)");
  }
  if (absl::StrContains(pb, "invalid value")) {
    const size_t t = pb.rfind("for type TYPE_");
    std::string type = t == std::string::npos ? "" : absl::AsciiStrToLower(pb.substr(t + 14));
    if (type.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789") != std::string::npos) {
      type.clear();
    }
    return absl::StrCat("a value of the wrong type ", in,
                        type.empty() ? "" : absl::StrCat(" (expected ", type, ")"));
  }
  return absl::StrCat("a value the format does not allow ", in);
}

}  // namespace

const char* AuthzActionName(AuthzAction a) { return kActionNames[static_cast<int>(a)]; }

int IdentitySpecificity(absl::string_view pattern) {
  if (pattern.find('*') == absl::string_view::npos) return INT_MAX;
  return static_cast<int>(pattern.size() - std::count(pattern.begin(), pattern.end(), '*'));
}

bool IdentityMatches(absl::string_view pattern, absl::string_view s) {
  // Iterative glob with backtracking to the last '*': O(|pattern| * |s|).
  size_t p = 0, i = 0, star = absl::string_view::npos, mark = 0;
  while (i < s.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = i;
    } else if (p < pattern.size() && pattern[p] == s[i]) {
      ++p;
      ++i;
    } else if (star != absl::string_view::npos) {
      p = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

absl::StatusOr<std::shared_ptr<const AuthzPolicy>> AuthzPolicy::Parse(absl::string_view json) {
  v1::AuthzPolicy msg;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto st = google::protobuf::util::JsonStringToMessage(std::string(json), &msg, opts);
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not valid JSON of the AuthzPolicy format: ",
        DescribeJsonError(json, std::string(st.message().data(), st.message().size()))));
  }
  auto p = std::shared_ptr<AuthzPolicy>(new AuthzPolicy());
  for (int i = 0; i < msg.rules_size(); ++i) {
    const v1::AuthzRule& r = msg.rules(i);
    Rule rule;
    // Errors name the rule by number only: nothing read from the file is
    // echoed (a wrong file may hold a secret). A valid rule's description
    // is shown when it decides (its label).
    const std::string where = absl::StrCat("rule ", i + 1);
    rule.label = where;
    if (!r.description().empty()) absl::StrAppend(&rule.label, " (", r.description(), ")");
    if (r.identities().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": \"identities\" is empty"));
    }
    for (const auto& id : r.identities()) {
      if (id.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": an empty identity pattern (use \"*\" for anyone)"));
      }
      rule.identities.push_back(id);
    }
    if (r.locks().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": \"locks\" is empty (\"\" means every lock)"));
    }
    rule.locks.assign(r.locks().begin(), r.locks().end());
    for (int j = 0; j < r.actions_size(); ++j) {
      const std::string& a = r.actions(j);
      if (a == "*") {
        rule.actions = kAllActions;
        continue;
      }
      auto it = std::find(std::begin(kActionNames), std::end(kActionNames), a);
      if (it == std::end(kActionNames)) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": actions[", j,
            "] is not a known action (known: acquire, describe, list, release, revoke, "
            "keepalive, proclaim, *)"));
      }
      rule.actions |= 1u << (it - std::begin(kActionNames));
    }
    if (r.admin()) rule.actions = kAllActions;
    rule.deny = r.deny();
    if (rule.deny && (r.admin() || r.actions_size() > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          rule.label, ": a deny rule refuses every action; it takes no actions or admin"));
    }
    if (!rule.deny && rule.actions == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": grants nothing (give actions, admin, or deny)"));
    }
    p->rules_.push_back(std::move(rule));
  }
  absl::StatusOr<QuotaSet> quotas = QuotaSet::FromProto(msg);
  if (!quotas.ok()) return quotas.status();
  p->quotas_ = std::move(*quotas);
  // Rules by lock prefix: a check looks up the prefixes of the lock name
  // (at most 257) instead of walking every rule, so 10,000 rules cost
  // about what 10 do.
  for (size_t ri = 0; ri < p->rules_.size(); ++ri) {
    for (const auto& prefix : p->rules_[ri].locks) {
      auto& v = p->by_prefix_[prefix];
      if (v.empty() || v.back() != ri) v.push_back(ri);
    }
  }
  return std::shared_ptr<const AuthzPolicy>(std::move(p));
}

AuthzPolicy::Decision AuthzPolicy::Check(absl::string_view identity, AuthzAction action,
                                         absl::string_view lock) const {
  // (identity specificity, lock prefix length, deny) of the best rule so far.
  const Rule* best = nullptr;
  std::tuple<int, int, bool> best_key{-1, -1, false};
  // Every prefix of the lock name that some rule names, shortest first; a
  // rule is weighed at each of its prefixes that match, so its longest
  // matching prefix counts (as walking every rule would find).
  for (size_t len = 0; len <= lock.size(); ++len) {
    auto it = by_prefix_.find(lock.substr(0, len));
    if (it == by_prefix_.end()) continue;
    for (size_t ri : it->second) {
      const Rule& r = rules_[ri];
      int id_spec = -1;
      for (const auto& pat : r.identities) {
        if (IdentityMatches(pat, identity)) id_spec = std::max(id_spec, IdentitySpecificity(pat));
      }
      if (id_spec < 0) continue;
      std::tuple<int, int, bool> key{id_spec, static_cast<int>(len), r.deny};
      if (best == nullptr || key > best_key) {
        best = &r;
        best_key = key;
      }
    }
  }
  if (best == nullptr) return {false, "no rule matches"};
  if (best->deny) return {false, absl::StrCat(best->label, " denies"), true};
  const bool ok = (best->actions >> static_cast<int>(action)) & 1u;
  return {ok, absl::StrCat(best->label, ok ? " allows" : " does not allow this action")};
}

bool AuthzPolicy::MayAllowUnder(absl::string_view identity, AuthzAction action,
                                absl::string_view prefix) const {
  // A name under `prefix` can be allowed only by an allow rule for the
  // caller whose own prefix extends `prefix` and which wins there (a deny
  // for the caller that is as specific or more shadows it). A rule whose
  // prefix is shorter than `prefix` decides `prefix` itself: see Check.
  for (const Rule& r : rules_) {
    if (r.deny || !((r.actions >> static_cast<int>(action)) & 1u)) continue;
    bool id = false;
    for (const auto& pat : r.identities) id = id || IdentityMatches(pat, identity);
    if (!id) continue;
    for (const auto& l : r.locks) {
      if (absl::StartsWith(l, prefix) && Check(identity, action, l).allowed) return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------- PolicyFile

absl::StatusOr<std::shared_ptr<const AuthzPolicy>> PolicyFile::ParseHere(
    absl::string_view text) const {
  auto p = AuthzPolicy::Parse(text);
  if (p.ok() && !rules_allowed_ && (*p)->rule_count() > 0) {
    return absl::InvalidArgumentError(
        "it has rules, which need --tls-client-ca-file (identities come only from verified "
        "client certificates); without mutual TLS a policy file may hold only quotas");
  }
  return p;
}

absl::StatusOr<std::unique_ptr<PolicyFile>> PolicyFile::Load(const std::string& path,
                                                            bool rules_allowed) {
  auto f = std::unique_ptr<PolicyFile>(new PolicyFile(path, rules_allowed));
  // Not shared yet: the locks only satisfy the analysis (start-up, once).
  absl::MutexLock reload(&f->reload_mu_);
  auto text = f->file_.ReadNow();
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--authz-file: ", text.status().message()));
  auto p = f->ParseHere(*text);
  if (!p.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--authz-file ", path, ": ", p.status().message()));
  }
  {
    absl::MutexLock l(&f->mu_);
    f->policy_ = *p;
  }
  return f;
}

std::shared_ptr<const AuthzPolicy> PolicyFile::current() const {
  absl::MutexLock l(&mu_);
  return policy_;
}

bool PolicyFile::Reload(bool force) {
  absl::MutexLock reload(&reload_mu_);
  auto text = file_.Changed(force);
  if (!text.ok()) {
    std::fprintf(stderr,
                 "turnstiled: authz policy %s: %s; the previous policy stays in force\n",
                 path().c_str(), std::string(text.status().message()).c_str());
    return false;
  }
  if (!text->has_value()) return false;
  auto p = ParseHere(**text);
  if (!p.ok()) {
    std::fprintf(stderr,
                 "turnstiled: authz policy %s rejected: %s; the previous policy stays in force\n",
                 path().c_str(), std::string(p.status().message()).c_str());
    return false;
  }
  {
    absl::MutexLock l(&mu_);
    policy_ = *p;
  }
  std::fprintf(stderr, "turnstiled: authz policy %s loaded (%zu rules, %zu quotas)\n",
               path().c_str(), (*p)->rule_count(), (*p)->quotas().size());
  return true;
}

void AuditLog(absl::string_view event, absl::string_view identity, absl::string_view action,
              absl::string_view lock, absl::string_view detail,
              const std::vector<std::pair<std::string, std::string>>& extra) {
  std::string more;
  for (const auto& [k, v] : extra) absl::StrAppend(&more, ",", JsonQuote(k), ":", JsonQuote(v));
  const std::string line = absl::StrCat(
      "{\"audit\":", JsonQuote(std::string(event)),
      ",\"time\":", JsonQuote(absl::FormatTime(absl::RFC3339_full, absl::Now(), absl::UTCTimeZone())),
      ",\"identity\":", JsonQuote(std::string(identity)),
      ",\"action\":", JsonQuote(std::string(action)), ",\"lock\":", JsonQuote(std::string(lock)),
      ",\"detail\":", JsonQuote(std::string(detail)), more, "}\n");
  std::fputs(line.c_str(), stderr);
}

}  // namespace turnstile
