#include "server/rpc/authz.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <tuple>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/security/auth_context.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/json_quote.h"
#include "server/rpc/cert_names.h"
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

// ---------------------------------------------------------- ClientCertVerifier

namespace {

struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
using X509Ptr = std::unique_ptr<X509, X509Deleter>;

std::vector<X509Ptr> ReadCerts(const std::string& pem) {
  std::vector<X509Ptr> out;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return out;
  while (X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) out.emplace_back(x);
  ERR_clear_error();  // the read that ends the loop leaves "no start line"
  BIO_free(bio);
  return out;
}

}  // namespace

struct ClientCertVerifier::Trust {
  X509_STORE* store = nullptr;
  size_t crls = 0;
  ~Trust() {
    if (store != nullptr) X509_STORE_free(store);
  }
};

namespace {

struct CrlDeleter {
  void operator()(X509_CRL* c) const { X509_CRL_free(c); }
};
using CrlPtr = std::unique_ptr<X509_CRL, CrlDeleter>;

// Every PEM CRL in `pem`; INVALID_ARGUMENT naming the first bad one by
// number (never its bytes).
absl::StatusOr<std::vector<CrlPtr>> ReadCrls(const std::string& pem) {
  std::vector<CrlPtr> out;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return absl::ResourceExhaustedError("out of memory");
  while (X509_CRL* c = PEM_read_bio_X509_CRL(bio, nullptr, nullptr, nullptr)) out.emplace_back(c);
  const unsigned long err = ERR_peek_last_error();
  ERR_clear_error();
  BIO_free(bio);
  // The read that ends the loop fails with "no start line" at the end of
  // the text; any other failure is a damaged CRL.
  if (err != 0 && ERR_GET_REASON(err) != PEM_R_NO_START_LINE) {
    return absl::InvalidArgumentError(
        absl::StrCat("CRL ", out.size() + 1, " cannot be parsed (", ERR_reason_error_string(err),
                     ")"));
  }
  if (out.empty()) return absl::InvalidArgumentError("holds no PEM CRL (-----BEGIN X509 CRL-----)");
  return out;
}

// An expired CRL still revokes what it lists; only its age is forgiven,
// as etcd's --client-crl-file does: a CA that is late to publish must not
// lock every client out. (Revoked serials are what the file is for.)
int ForgiveCrlAge(int ok, X509_STORE_CTX* ctx) {
  if (ok == 0) {
    const int err = X509_STORE_CTX_get_error(ctx);
    if (err == X509_V_ERR_CRL_HAS_EXPIRED || err == X509_V_ERR_CRL_NOT_YET_VALID) return 1;
  }
  return ok;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ClientCertVerifier::Trust>> ClientCertVerifier::MakeTrust(
    const std::string& ca_pem, const std::string& crl_pem) const {
  auto cas = ReadCerts(ca_pem);
  if (cas.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca-file holds no PEM certificate");
  }
  auto t = std::make_shared<Trust>();
  t->store = X509_STORE_new();
  if (t->store == nullptr) return absl::ResourceExhaustedError("out of memory");
  for (auto& ca : cas) X509_STORE_add_cert(t->store, ca.get());
  if (crl_file_ == nullptr) return std::shared_ptr<const Trust>(std::move(t));
  auto crls = ReadCrls(crl_pem);
  if (!crls.ok()) return crls.status();
  for (size_t i = 0; i < crls->size(); ++i) {
    X509_CRL* crl = (*crls)[i].get();
    // Signed by one of the client CAs, or it would silently check nothing.
    bool signed_by_ca = false;
    for (auto& ca : cas) {
      if (X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_subject_name(ca.get())) != 0) continue;
      EVP_PKEY* key = X509_get0_pubkey(ca.get());
      if (key != nullptr && X509_CRL_verify(crl, key) == 1) signed_by_ca = true;
    }
    ERR_clear_error();
    if (!signed_by_ca) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CRL ", i + 1, " is not signed by a CA of --tls-client-ca-file"));
    }
    X509_STORE_add_crl(t->store, crl);
  }
  t->crls = crls->size();
  // The leaf is checked against its issuer's CRL: every CA that issues
  // client certificates needs one in the file.
  X509_STORE_set_flags(t->store, X509_V_FLAG_CRL_CHECK);
  X509_STORE_set_verify_cb(t->store, ForgiveCrlAge);
  return std::shared_ptr<const Trust>(std::move(t));
}

absl::StatusOr<std::unique_ptr<ClientCertVerifier>> ClientCertVerifier::Create(
    const std::string& ca_pem, const std::string& crl_path, const std::string& ca_path) {
  auto v = std::unique_ptr<ClientCertVerifier>(new ClientCertVerifier());
  // Not shared yet: the locks only satisfy the analysis (start-up, once).
  absl::MutexLock reload(&v->reload_mu_);
  v->ca_pem_ = ca_pem;
  if (!ca_path.empty()) {
    v->ca_file_ = std::make_unique<WatchedFile>(ca_path);
    auto text = v->ca_file_->ReadNow();  // remembered as seen
    if (text.ok()) v->ca_pem_ = *text;
  }
  std::string crl_pem;
  if (!crl_path.empty()) {
    v->crl_file_ = std::make_unique<WatchedFile>(crl_path);
    auto text = v->crl_file_->ReadNow();
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--tls-client-crl-file: ", text.status().message()));
    }
    crl_pem = *text;
  }
  v->crl_pem_ = crl_pem;
  auto trust = v->MakeTrust(v->ca_pem_, crl_pem);
  if (!trust.ok()) {
    if (crl_path.empty() || absl::StrContains(trust.status().message(), "--tls-client-ca-file holds")) {
      return trust.status();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-client-crl-file ", crl_path, ": ", trust.status().message()));
  }
  {
    absl::MutexLock l(&v->mu_);
    v->trust_ = *trust;
  }
  return v;
}

ClientCertVerifier::~ClientCertVerifier() = default;

std::shared_ptr<const ClientCertVerifier::Trust> ClientCertVerifier::trust() const {
  absl::MutexLock l(&mu_);
  return trust_;
}

bool ClientCertVerifier::ReloadCrl(bool force) {
  absl::MutexLock reload(&reload_mu_);
  if (crl_file_ == nullptr) return false;
  auto text = crl_file_->Changed(force);
  if (!text.ok()) {
    std::fprintf(stderr, "turnstiled: client CRL %s: %s; the previous CRL stays in force\n",
                 crl_file_->path().c_str(), std::string(text.status().message()).c_str());
    return false;
  }
  if (!text->has_value()) return false;
  auto trust = MakeTrust(ca_pem_, **text);
  if (!trust.ok()) {
    std::fprintf(stderr, "turnstiled: client CRL %s rejected: %s; the previous CRL stays in force\n",
                 crl_file_->path().c_str(), std::string(trust.status().message()).c_str());
    return false;
  }
  crl_pem_ = **text;
  {
    absl::MutexLock l(&mu_);
    trust_ = *trust;
    cache_.clear();  // every identity is verified again under the new CRL
  }
  std::fprintf(stderr, "turnstiled: client CRL %s loaded (%zu CRLs)\n", crl_file_->path().c_str(),
               (*trust)->crls);
  return true;
}

bool ClientCertVerifier::ReloadCa(bool force) {
  absl::MutexLock reload(&reload_mu_);
  if (ca_file_ == nullptr) return false;
  auto text = ca_file_->Changed(force);
  if (!text.ok()) {
    std::fprintf(stderr, "turnstiled: client CA %s: %s; the previous CA bundle stays in force\n",
                 ca_file_->path().c_str(), std::string(text.status().message()).c_str());
    return false;
  }
  if (!text->has_value()) return false;
  auto trust = MakeTrust(**text, crl_pem_);
  if (!trust.ok()) {
    std::fprintf(stderr,
                 "turnstiled: client CA %s rejected: %s; the previous CA bundle stays in force\n",
                 ca_file_->path().c_str(), std::string(trust.status().message()).c_str());
    return false;
  }
  ca_pem_ = **text;
  {
    absl::MutexLock l(&mu_);
    trust_ = *trust;
    cache_.clear();  // every identity is verified again under the new CAs
  }
  // Which CA of the bundle expires first, and when (UTC): the next
  // rotation is due before it.
  std::vector<X509Ptr> cas = ReadCerts(ca_pem_);
  std::string first;
  int64_t first_at = 0;
  for (auto& ca : cas) {
    const CertNames n = NamesOf(ca.get());
    if (first.empty() || (n.not_after != 0 && n.not_after < first_at)) {
      first = n.subject;
      first_at = n.not_after;
    }
  }
  std::fprintf(stderr, "turnstiled: client CA %s loaded (%zu certificates; the first to expire: "
               "\"%s\", valid until %s)\n", ca_file_->path().c_str(), cas.size(), first.c_str(),
               UtcTime(first_at).c_str());
  return true;
}

absl::StatusOr<std::string> ClientCertVerifier::Identify(const grpc::AuthContext& ctx) {
  auto leaf = ctx.FindPropertyValues("x509_pem_cert");
  if (leaf.empty()) {
    return absl::UnauthenticatedError(
        "no client certificate: this replica requires mutual TLS (--tls-client-ca-file)");
  }
  std::string chain;
  for (const auto& c : ctx.FindPropertyValues("x509_pem_cert_chain")) chain.append(c.data(), c.size());
  return IdentifyPem(std::string(leaf.front().data(), leaf.front().size()), chain);
}

absl::StatusOr<std::string> ClientCertVerifier::IdentifyPem(const std::string& leaf_pem,
                                                           const std::string& chain_pem) {
  const time_t now = std::time(nullptr);
  std::shared_ptr<const Trust> trust;
  {
    absl::MutexLock l(&mu_);
    auto it = cache_.find(leaf_pem);
    if (it != cache_.end() && now < it->second.not_after) return it->second.identity;
    trust = trust_;
  }
  auto leaf = ReadCerts(leaf_pem);
  if (leaf.empty()) return absl::UnauthenticatedError("the client certificate cannot be parsed");
  auto chain = ReadCerts(chain_pem);
  STACK_OF(X509)* untrusted = sk_X509_new_null();
  for (auto& c : chain) sk_X509_push(untrusted, c.get());
  X509_STORE_CTX* vctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(vctx, trust->store, leaf[0].get(), untrusted);
  X509_STORE_CTX_set_purpose(vctx, X509_PURPOSE_SSL_CLIENT);
  const int ok = X509_verify_cert(vctx);
  const int err = X509_STORE_CTX_get_error(vctx);
  X509_STORE_CTX_free(vctx);
  sk_X509_free(untrusted);
  ERR_clear_error();
  const CertNames names = NamesOf(leaf[0].get());
  // A refusal names the certificate (which one keeps being refused); the
  // audit line gets the names as fields of their own (cert_names.h).
  auto refused = [&names](const std::string& why) {
    absl::Status s = absl::UnauthenticatedError(
        absl::StrCat(why, "; the certificate: ", DescribeCertificate(names)));
    AttachRefusedCertificate(names, &s);
    return s;
  };
  if (ok != 1) {
    if (err == X509_V_ERR_CERT_REVOKED) {
      return refused(
          "client certificate refused: certificate revoked (listed in --tls-client-crl-file)");
    }
    if (err == X509_V_ERR_UNABLE_TO_GET_CRL) {
      return refused(
          "client certificate refused: unable to get certificate CRL (--tls-client-crl-file has "
          "no CRL of the certificate's issuer)");
    }
    return refused(absl::StrCat(
        "client certificate refused: ", X509_verify_cert_error_string(err),
        " (it must be valid now and issued by --tls-client-ca-file)"));
  }
  const std::string& identity = names.identity;
  if (identity.empty()) {
    return refused("client certificate names nobody: no URI SAN, DNS SAN or subject CN");
  }
  const time_t not_after = static_cast<time_t>(names.not_after);
  absl::MutexLock l(&mu_);
  if (trust != trust_) return identity;  // a new CRL came meanwhile: do not cache
  if (cache_.size() >= 4096) cache_.clear();  // bounded; rebuilt by the next calls
  cache_[leaf_pem] = Cached{identity, not_after};
  return identity;
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
