// What transport security and a policy cost: W1..W3 run over a plaintext
// replica (--server) and over each --secure-server (TLS, mutual TLS, mutual
// TLS with a policy of N rules), all on the same ZooKeeper and in the same
// run, their slices interleaved, and every side is reported as a ratio to
// plaintext. Before that, each secure side is checked to be what it says:
// plaintext is refused, a client without a certificate is refused (mutual
// TLS), a lock outside the policy is PERMISSION_DENIED (policy).
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "client/bench/acquire_call.h"
#include "client/bench/security.h"
#include "client/lib/tls.h"

namespace turnstile::bench {
namespace {

double Ratio(double a, double b) { return b > 0 && std::isfinite(a) ? a / b : NAN; }

std::string Fmt(double v, const char* fmt = "%.3f") {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// One try-once Acquire over `channel`, released at once if granted: its
// final status (and whether ACQUIRED came). Bounded by `timeout`.
grpc::Status TryOnce(const std::shared_ptr<grpc::Channel>& channel, const std::string& lock,
                     Millis timeout, bool* acquired) {
  *acquired = false;
  auto stub = v1::LockService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(ToSystem(Clock::now() + timeout));
  auto rw = stub->Acquire(&ctx);
  AcquireRequest req;
  req.mutable_open()->set_name(lock);
  req.mutable_open()->set_owner("turnstile-bench-probe");
  rw->Write(req);
  AcquireEvent ev;
  while (rw->Read(&ev)) {
    if (ev.type() == AcquireEvent::ACQUIRED) {
      *acquired = true;
      rw->WritesDone();  // releases
    }
  }
  return rw->Finish();
}

std::string StatusText(const grpc::Status& s) {
  return s.ok() ? "OK" : std::to_string(s.error_code()) + " " + s.error_message();
}

// Per side: one channel per client, kept over every slice; the replica's
// and this process's CPU over the side's slices.
struct Side {
  std::string label;
  int pid = 0;
  const SecureServer* secure = nullptr;  // null: the plaintext side
  std::unique_ptr<TurnstileCycles> cycles;
  CycleSamples samples;
  double server_cpu_s = 0;
  double client_cpu_s = 0;
  bool server_cpu_known = true;
  bool client_cpu_known = true;
};

// "ABCDDCBA..." for `sides` sides and `slices` rounds: each round runs every
// side once, every other round in reverse, so a drift over the workload
// falls on every side alike (a linear one cancels over two rounds).
std::vector<int> RoundOrder(int sides, int round) {
  std::vector<int> order;
  for (int k = 0; k < sides; ++k) order.push_back(round % 2 == 0 ? k : sides - 1 - k);
  return order;
}

std::string OrderText(int sides, int slices) {
  std::string out;
  for (int r = 0; r < slices; ++r) {
    for (int k : RoundOrder(sides, r)) out += static_cast<char>('A' + k);
  }
  return out;
}

}  // namespace

bool ParseSecureServer(const std::string& value, SecureServer* out, std::string* error) {
  *out = SecureServer();
  const size_t eq = value.find('=');
  if (eq == std::string::npos || eq == 0) {
    *error = "must be LABEL=ADDRESS[,ca=FILE][,cert=FILE,key=FILE][,server-name=NAME][,pid=PID]"
             "[,rules=N]";
    return false;
  }
  out->label = value.substr(0, eq);
  for (char c : out->label) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') {
      *error = "label \"" + out->label + "\" must be letters, digits, '-' and '_'";
      return false;
    }
  }
  if (out->label == "plaintext") {
    *error = "label \"plaintext\" is --server's";
    return false;
  }
  std::vector<std::string> parts;
  size_t pos = eq + 1;
  while (pos <= value.size()) {
    size_t comma = value.find(',', pos);
    if (comma == std::string::npos) comma = value.size();
    parts.push_back(value.substr(pos, comma - pos));
    pos = comma + 1;
  }
  out->address = parts[0];
  if (out->address.empty()) {
    *error = "no address";
    return false;
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t e = parts[i].find('=');
    const std::string key = parts[i].substr(0, e);
    const std::string v = e == std::string::npos ? "" : parts[i].substr(e + 1);
    if (e == std::string::npos || v.empty()) {
      *error = "\"" + parts[i] + "\" is not KEY=VALUE";
      return false;
    }
    auto number = [&](int lo, int hi, int* n) {
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || x < lo || x > hi) {
        *error = key + "=" + v + " must be " + std::to_string(lo) + ".." + std::to_string(hi);
        return false;
      }
      *n = static_cast<int>(x);
      return true;
    };
    if (key == "ca") {
      out->ca_file = v;
    } else if (key == "cert") {
      out->cert_file = v;
    } else if (key == "key") {
      out->key_file = v;
    } else if (key == "server-name") {
      out->server_name = v;
    } else if (key == "pid") {
      if (!number(1, 1 << 30, &out->pid)) return false;
    } else if (key == "rules") {
      if (!number(1, 10000000, &out->policy_rules)) return false;
    } else {
      *error = "unknown key \"" + key + "\" (ca, cert, key, server-name, pid, rules)";
      return false;
    }
  }
  if (out->ca_file.empty()) {
    *error = "needs ca=FILE (a secure side is TLS)";
    return false;
  }
  if (out->cert_file.empty() != out->key_file.empty()) {
    *error = "cert= and key= go together (mutual TLS)";
    return false;
  }
  if (out->policy_rules > 0 && !out->mtls()) {
    *error = "rules= needs cert= and key= (a policy needs mutual TLS)";
    return false;
  }
  return true;
}

std::vector<SecureCheck> CheckSecureServers(const BenchOptions& o) {
  std::vector<SecureCheck> checks;
  if (o.secure.empty()) return checks;
  std::printf("\nsecure sides (each checked to be what it says):\n");
  const Millis timeout(5000);
  for (size_t i = 0; i < o.secure.size(); ++i) {
    const SecureServer& s = o.secure[i];
    SecureCheck c;
    c.label = s.label;
    std::string error;
    Endpoint endpoint;
    bool acquired = false;
    if (!SecureEndpoint(s, &endpoint, &error)) {
      c.error = error;
      checks.push_back(c);
      std::printf("  %-12s ERROR: %s\n", s.label.c_str(), error.c_str());
      continue;
    }
    const int index = 9000 + static_cast<int>(i) * 10;
    const std::string tag = o.run_tag + "-" + s.label;
    // Its own credentials: a lock the bench may use is granted.
    grpc::Status st = TryOnce(MakeChannel(endpoint, index), "bench-" + tag + "-probe", timeout,
                              &acquired);
    c.allowed = st.ok() && acquired;
    if (!c.allowed) c.error = "Acquire with its credentials: " + StatusText(st);
    // Plaintext is refused (the replica speaks TLS only).
    st = TryOnce(MakeChannel(Endpoint{s.address, nullptr, ""}, index + 1),
                 "bench-" + tag + "-plaintext", timeout, &acquired);
    c.plaintext_refused = !st.ok() && !acquired;
    if (s.mtls()) {
      // TLS without a client certificate is refused.
      auto server_only = client::MakeChannelCredentials({s.ca_file, "", ""});
      if (server_only.ok()) {
        st = TryOnce(MakeChannel(Endpoint{s.address, *server_only, s.server_name}, index + 2),
                     "bench-" + tag + "-no-cert", timeout, &acquired);
        c.no_client_cert_refused = !st.ok() && !acquired ? 1 : 0;
      }
    }
    if (s.policy_rules > 0) {
      // The policy decides: a lock it does not grant the bench is refused.
      st = TryOnce(MakeChannel(endpoint, index + 3), "probe-denied-" + tag, timeout, &acquired);
      c.outside_policy_denied = st.error_code() == grpc::StatusCode::PERMISSION_DENIED ? 1 : 0;
      if (c.outside_policy_denied != 1 && c.error.empty()) {
        c.error = "Acquire outside the policy: " + StatusText(st) + " (not PERMISSION_DENIED)";
      }
    }
    if (c.error.empty() && !c.plaintext_refused) c.error = "plaintext was not refused";
    if (c.error.empty() && c.no_client_cert_refused == 0) {
      c.error = "a client without a certificate was not refused";
    }
    auto yes_no = [](int v) { return v < 0 ? "-" : v ? "yes" : "NO"; };
    std::printf("  %-12s %s%s%s; granted with its credentials: %s; plaintext refused: %s; "
                "no client certificate refused: %s; outside the policy denied: %s\n",
                s.label.c_str(), s.address.c_str(), s.mtls() ? ", mutual TLS" : ", TLS",
                s.policy_rules > 0 ? (", policy of " + std::to_string(s.policy_rules) + " rules")
                                         .c_str()
                                   : "",
                yes_no(c.allowed), yes_no(c.plaintext_refused), yes_no(c.no_client_cert_refused),
                yes_no(c.outside_policy_denied));
    if (!c.error.empty()) std::printf("  %-12s ERROR: %s\n", s.label.c_str(), c.error.c_str());
    checks.push_back(c);
  }
  std::fflush(stdout);
  return checks;
}

void WarmSecureServers(const BenchOptions& o, Millis each) {
  for (const SecureServer& s : o.secure) {
    Endpoint endpoint;
    std::string error;
    if (!SecureEndpoint(s, &endpoint, &error)) continue;  // CheckSecureServers said why
    const std::string base = "bench-" + o.run_tag + "-warmup-" + s.label;
    TurnstileCycles cycles(endpoint, {base + "-solo", base + "-shared", base + "-shared",
                                      base + "-shared"});
    CycleSamples r;
    if (cycles.Connect(&error)) {
      r = cycles.Run(each);
    } else {
      r.errors = 1;
      r.error = error;
    }
    std::printf("warm-up, %s: %.1f s unmeasured, 1 client + 3 on one lock, %llu cycles%s%s\n",
                s.label.c_str(), each.count() / 1000.0,
                static_cast<unsigned long long>(r.cycles), r.errors ? "; " : "",
                r.errors ? r.error.c_str() : "");
  }
  std::fflush(stdout);
}

bool RunSecurity(const BenchOptions& o, const std::string& w, int clients, bool one_lock,
                 const std::vector<SecureCheck>& checks) {
  const std::string W = w == "w1" ? "W1" : w == "w2" ? "W2" : "W3";
  const double secs = o.duration.count() / 1000.0;
  const Millis slice = o.duration / o.slices;
  const char* rate = w == "w1" ? "ops_per_s" : "cycles_per_s";

  std::vector<Side> sides(1 + o.secure.size());
  sides[0].label = "plaintext";
  sides[0].pid = o.server_pid;
  std::vector<std::string> errors;
  for (size_t k = 0; k < sides.size(); ++k) {
    Side& side = sides[k];
    Endpoint endpoint{o.server, nullptr, ""};
    if (k > 0) {
      side.secure = &o.secure[k - 1];
      side.label = side.secure->label;
      side.pid = side.secure->pid;
      std::string error;
      if (!SecureEndpoint(*side.secure, &endpoint, &error)) {
        side.samples.errors = 1;
        side.samples.error = error;
        continue;
      }
    }
    // Each side on locks of its own (all under "bench-", which the policy
    // grants).
    std::vector<std::string> names;
    for (int i = 0; i < clients; ++i) {
      std::string name = "bench-" + o.run_tag + "-" + w + "-" + side.label;
      if (!one_lock && clients > 1) name += "-" + std::to_string(i);
      names.push_back(name);
    }
    side.cycles = std::make_unique<TurnstileCycles>(endpoint, names);
    std::string error;
    if (!side.cycles->Connect(&error)) {
      side.samples.errors = 1;
      side.samples.error = error;
    }
  }

  std::string legend;
  for (size_t k = 0; k < sides.size(); ++k) {
    legend += std::string(k ? ", " : "") + static_cast<char>('A' + k) + " " + sides[k].label;
  }
  std::printf("\n== %s over TLS, mutual TLS and a policy: %d client%s, %d lock%s per side, hold "
              "0, %.1f s per side; ZooKeeper fsync %s\n",
              W.c_str(), clients, clients == 1 ? "" : "s", one_lock ? 1 : clients,
              one_lock || clients == 1 ? "" : "s", secs, o.zk_fsync.c_str());
  std::printf("   one replica per side (same ZooKeeper, same flags but security); channels open "
              "before the first slice,\n   so this is per-call cost, not handshakes; sides "
              "interleaved %s (%s)\n   in %d slices of %.2f s per side\n",
              OrderText(static_cast<int>(sides.size()), o.slices).c_str(), legend.c_str(),
              o.slices, slice.count() / 1000.0);
  std::fflush(stdout);

  const int self = static_cast<int>(getpid());
  for (int r = 0; r < o.slices; ++r) {
    for (int k : RoundOrder(static_cast<int>(sides.size()), r)) {
      Side& side = sides[k];
      if (side.samples.errors > 0 || side.cycles == nullptr) continue;
      const double server0 = side.pid > 0 ? ProcessCpuSeconds(side.pid) : -1;
      const double client0 = ProcessCpuSeconds(self);
      CycleSamples s = side.cycles->Run(slice);
      const double server1 = side.pid > 0 ? ProcessCpuSeconds(side.pid) : -1;
      const double client1 = ProcessCpuSeconds(self);
      if (server0 < 0 || server1 < 0) {
        side.server_cpu_known = false;
      } else {
        side.server_cpu_s += server1 - server0;
      }
      if (client0 < 0 || client1 < 0) {
        side.client_cpu_known = false;
      } else {
        side.client_cpu_s += client1 - client0;
      }
      side.samples.Merge(std::move(s));
    }
  }

  // Results, per side.
  struct Out {
    CycleResult r;
    double server_cpu_ms = NAN, client_cpu_ms = NAN;
  };
  std::vector<Out> out(sides.size());
  for (size_t k = 0; k < sides.size(); ++k) {
    out[k].r = sides[k].samples.Result();
    const double n = static_cast<double>(out[k].r.cycles);
    if (n > 0 && sides[k].server_cpu_known && sides[k].pid > 0) {
      out[k].server_cpu_ms = sides[k].server_cpu_s * 1000 / n;
    }
    if (n > 0 && sides[k].client_cpu_known) out[k].client_cpu_ms = sides[k].client_cpu_s * 1000 / n;
    if (out[k].r.errors > 0) errors.push_back(sides[k].label + ": " + out[k].r.error);
  }
  for (const SecureCheck& c : checks) {
    if (!c.error.empty()) errors.push_back(c.label + " check: " + c.error);
  }

  // The table: one column per side, then its ratios to plaintext.
  struct Metric {
    const char* name;
    const char* fmt;
    double (*get)(const Out&);
  };
  std::vector<Metric> metrics = {
      {w == "w1" ? "ops/s (acquire+release cycles)" : "cycles/s", "%.1f",
       [](const Out& x) { return x.r.per_second; }},
      {"cycle p50 (ms)", "%.3f", [](const Out& x) { return x.r.cycle.p50_ms; }},
      {"cycle p99 (ms)", "%.3f", [](const Out& x) { return x.r.cycle.p99_ms; }},
  };
  if (one_lock && clients > 1) {
    metrics.push_back({"release sent -> next ACQUIRED p50 (ms)", "%.3f",
                       [](const Out& x) { return x.r.release_to_acquired.p50_ms; }});
  }
  metrics.push_back({"turnstiled CPU per cycle (ms)", "%.3f",
                     [](const Out& x) { return x.server_cpu_ms; }});
  metrics.push_back({"client CPU per cycle (ms, this bench)", "%.3f",
                     [](const Out& x) { return x.client_cpu_ms; }});
  std::printf("  %-40s", "metric");
  for (const Side& s : sides) std::printf(" %12s", s.label.c_str());
  std::printf("\n");
  for (const Metric& m : metrics) {
    std::printf("  %-40s", m.name);
    for (const Out& x : out) std::printf(" %12s", Fmt(m.get(x), m.fmt).c_str());
    std::printf("\n");
  }
  std::printf("  %-40s", "ratio to plaintext");
  for (const Side& s : sides) std::printf(" %12s", s.label.c_str());
  std::printf("\n");
  for (const Metric& m : metrics) {
    std::printf("  %-40s", m.name);
    for (const Out& x : out) {
      std::printf(" %12s", Fmt(Ratio(m.get(x), m.get(out[0])), "%.2f").c_str());
    }
    std::printf("\n");
  }
  std::printf("  cycles:");
  for (size_t k = 0; k < sides.size(); ++k) {
    std::printf(" %s %llu%s", sides[k].label.c_str(),
                static_cast<unsigned long long>(out[k].r.cycles),
                k + 1 < sides.size() ? "," : "\n");
  }
  std::printf("  cycles/s per slice, in order:");
  for (size_t k = 0; k < sides.size(); ++k) {
    std::printf(" %s", sides[k].label.c_str());
    for (double v : sides[k].samples.slice_rates) std::printf(" %s", Fmt(v, "%.0f").c_str());
    std::printf("%s", k + 1 < sides.size() ? ";" : "\n");
  }

  // The policy with the most rules against the one with the fewest: what
  // the policy's size costs a call.
  int most = -1, fewest = -1;
  for (size_t k = 1; k < sides.size(); ++k) {
    const int n = sides[k].secure->policy_rules;
    if (n <= 0) continue;
    if (most < 0 || n > sides[most].secure->policy_rules) most = static_cast<int>(k);
    if (fewest < 0 || n < sides[fewest].secure->policy_rules) fewest = static_cast<int>(k);
  }
  const bool compare_policies =
      most > 0 && fewest > 0 && sides[most].secure->policy_rules > sides[fewest].secure->policy_rules;
  if (compare_policies) {
    const Out& a = out[most];
    const Out& b = out[fewest];
    std::printf("  policy of %d rules / of %d rules (%s / %s): %s %s, cycle p50 %s, turnstiled "
                "CPU per cycle %s\n",
                sides[most].secure->policy_rules, sides[fewest].secure->policy_rules,
                sides[most].label.c_str(), sides[fewest].label.c_str(),
                w == "w1" ? "ops/s" : "cycles/s",
                Fmt(Ratio(a.r.per_second, b.r.per_second), "%.2f").c_str(),
                Fmt(Ratio(a.r.cycle.p50_ms, b.r.cycle.p50_ms), "%.2f").c_str(),
                Fmt(Ratio(a.server_cpu_ms, b.server_cpu_ms), "%.2f").c_str());
  }

  // BENCH_JSON.
  Json j;
  j.Str("workload", w + "-security")
      .Str("zk_fsync", o.zk_fsync)
      .Int("clients", clients)
      .Int("locks", one_lock ? 1 : clients)
      .Num("duration_s", secs)
      .Int("slices_per_side", o.slices)
      .Str("order", OrderText(static_cast<int>(sides.size()), o.slices));
  std::vector<Json> order;
  Json by_label;
  for (size_t k = 0; k < sides.size(); ++k) {
    const Out& x = out[k];
    Json s;
    s.Int("tls", k > 0 ? 1 : 0)
        .Int("mtls", k > 0 && sides[k].secure->mtls() ? 1 : 0)
        .Int("policy_rules", k > 0 ? sides[k].secure->policy_rules : 0)
        .Int("cycles", static_cast<int64_t>(x.r.cycles))
        .Num(rate, x.r.per_second)
        .Num("cycle_p50_ms", x.r.cycle.p50_ms)
        .Num("cycle_p99_ms", x.r.cycle.p99_ms)
        .Num("turnstiled_cpu_ms_per_cycle", x.server_cpu_ms)
        .Num("client_cpu_ms_per_cycle", x.client_cpu_ms)
        .Int("errors", static_cast<int64_t>(x.r.errors));
    if (one_lock && clients > 1) {
      s.Num("release_to_acquired_p50_ms", x.r.release_to_acquired.p50_ms);
    }
    Json ratio;
    ratio.Num(rate, Ratio(x.r.per_second, out[0].r.per_second))
        .Num("cycle_p50_ms", Ratio(x.r.cycle.p50_ms, out[0].r.cycle.p50_ms))
        .Num("cycle_p99_ms", Ratio(x.r.cycle.p99_ms, out[0].r.cycle.p99_ms))
        .Num("turnstiled_cpu_ms_per_cycle", Ratio(x.server_cpu_ms, out[0].server_cpu_ms))
        .Num("client_cpu_ms_per_cycle", Ratio(x.client_cpu_ms, out[0].client_cpu_ms));
    s.Obj("ratio_to_plaintext", ratio);
    if (k > 0) {
      const SecureCheck* c = nullptr;
      for (const SecureCheck& x2 : checks) {
        if (x2.label == sides[k].label) c = &x2;
      }
      Json cj;
      if (c != nullptr) {
        cj.Int("granted", c->allowed ? 1 : 0).Int("plaintext_refused", c->plaintext_refused ? 1 : 0);
        if (c->no_client_cert_refused >= 0) {
          cj.Int("no_client_cert_refused", c->no_client_cert_refused);
        } else {
          cj.Null("no_client_cert_refused");
        }
        if (c->outside_policy_denied >= 0) {
          cj.Int("outside_policy_denied", c->outside_policy_denied);
        } else {
          cj.Null("outside_policy_denied");
        }
      }
      s.Obj("checks", cj);
    }
    by_label.Obj(sides[k].label, s);
    order.push_back(Json().Str("label", sides[k].label));
  }
  j.Arr("side_order", order).Obj("sides", by_label);
  if (compare_policies) {
    const Out& a = out[most];
    const Out& b = out[fewest];
    j.Obj("policy_size", Json()
                             .Str("more", sides[most].label)
                             .Str("fewer", sides[fewest].label)
                             .Int("more_rules", sides[most].secure->policy_rules)
                             .Int("fewer_rules", sides[fewest].secure->policy_rules)
                             .Num(rate, Ratio(a.r.per_second, b.r.per_second))
                             .Num("cycle_p50_ms", Ratio(a.r.cycle.p50_ms, b.r.cycle.p50_ms))
                             .Num("cycle_p99_ms", Ratio(a.r.cycle.p99_ms, b.r.cycle.p99_ms))
                             .Num("turnstiled_cpu_ms_per_cycle",
                                  Ratio(a.server_cpu_ms, b.server_cpu_ms)));
  } else {
    j.Null("policy_size");
  }
  std::string error;
  for (const std::string& e : errors) error += (error.empty() ? "" : "; ") + e;
  if (error.empty()) {
    j.Num("ok", 1).Null("error");
  } else {
    std::printf("  ERROR: %s\n", error.c_str());
    j.Num("ok", 0).Str("error", error);
  }
  std::printf("BENCH_JSON %s\n", j.Text().c_str());
  std::fflush(stdout);
  return error.empty();
}

}  // namespace turnstile::bench
