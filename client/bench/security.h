// W1..W3 over TLS, mutual TLS and mutual TLS with a policy, against a
// plaintext replica in the same run (--secure-server): what transport
// security and authorization cost per lock cycle. Not a public API.
#ifndef TURNSTILE_CLIENT_BENCH_SECURITY_H_
#define TURNSTILE_CLIENT_BENCH_SECURITY_H_

#include <string>
#include <vector>

#include "client/bench/bench_internal.h"

namespace turnstile::bench {

// One --secure-server value:
// LABEL=ADDRESS,ca=FILE[,cert=FILE,key=FILE][,server-name=NAME][,pid=PID][,rules=N].
// False + *error (without the flag's name) if malformed.
bool ParseSecureServer(const std::string& value, SecureServer* out, std::string* error);

// What a secure side was checked to be, once per run before the workloads.
struct SecureCheck {
  std::string label;
  bool allowed = false;             // a try-once Acquire of a bench lock was granted
  bool plaintext_refused = false;   // the same over plaintext failed
  int no_client_cert_refused = -1;  // mutual TLS: the same over TLS without a
                                    // certificate failed (1) or not (0); -1 n/a
  int outside_policy_denied = -1;   // policy: "probe-denied-..." was
                                    // PERMISSION_DENIED (1) or not (0); -1 n/a
  std::string error;                // "" = it is what it says
};

// Checks every o.secure and prints one line each.
std::vector<SecureCheck> CheckSecureServers(const BenchOptions& o);

// Unmeasured cycles on every o.secure (1 client on a lock of its own, 3 on
// one shared lock) for `each`: the plaintext side's warm-up, for the others.
void WarmSecureServers(const BenchOptions& o, Millis each);

// Workload `w` (w1, w2, w3: `clients` clients, on one lock or one each)
// over plaintext (o.server) and every o.secure, in o.slices rounds of one
// slice per side (every other round reversed); prints a table with each
// side's ratio to plaintext, and the largest policy's over the smallest's,
// and one line "BENCH_JSON {"workload":"wN-security",...}". False if a side
// failed or a check in `checks` did.
bool RunSecurity(const BenchOptions& o, const std::string& w, int clients, bool one_lock,
                 const std::vector<SecureCheck>& checks);

}  // namespace turnstile::bench

#endif  // TURNSTILE_CLIENT_BENCH_SECURITY_H_
