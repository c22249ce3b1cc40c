// The authorization policy file (--authz-file; from a ConfigMap an operator
// edits) and the decision on it. Invariants: a parsed policy decides every
// call without crashing; an identity matched by a deny rule of the most
// specific kind is never allowed; a quota found for an identity has limits
// the parser allows.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/rpc/authz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  auto p = turnstile::AuthzPolicy::Parse(in);
  // The input also as a glob pattern and as an identity.
  (void)turnstile::IdentityMatches(in, "spiffe://example.org/ns/a/sa/b");
  (void)turnstile::IdentityMatches("spiffe://*/ns/*/sa/*", in);
  if (!p.ok()) return 0;
  for (int a = 0; a < turnstile::kAuthzActionCount; ++a) {
    const auto action = static_cast<turnstile::AuthzAction>(a);
    (void)(*p)->Check("spiffe://example.org/ns/a/sa/b", action, "payments/x");
    (void)(*p)->Check(in, action, in);
    (void)(*p)->MayAllowUnder(in, action, "");
  }
  // Its quotas: the input's own identity and a fixed one find theirs, and
  // a quota found has sane limits (a burst of at least one when rated).
  for (const std::string& who : {in, std::string("10.0.0.7")}) {
    const turnstile::QuotaLimits* q = (*p)->quotas().For(who);
    if (q != nullptr && q->opens_per_second > 0 && q->open_burst < 1) __builtin_trap();
    if (q != nullptr && q->max_streams > 0 && q->max_contenders > q->max_streams) __builtin_trap();
  }
  return 0;
}
