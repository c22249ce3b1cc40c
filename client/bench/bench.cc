// turnstile bench: the run, its flags parsed (options.h), the workloads in
// the order asked (workloads.h, security.h).
#include "client/bench/bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "client/bench/bench_internal.h"
#include "client/bench/options.h"
#include "client/bench/report.h"
#include "client/bench/security.h"
#include "client/bench/workloads.h"

namespace turnstile::bench {

int RunBench(int argc, char** argv) {
  BenchOptions o;
  int rc = ParseFlags(argc, argv, &o);
  if (rc == -1) return 0;  // --help: the usage is printed
  if (rc != 0) return rc;
  o.run_tag = std::to_string(getpid());

  // The warm-up runs once, before the first workload, if any of them
  // compares with the floor (w5 does not).
  const bool warm = o.warmup.count() > 0 &&
                    std::any_of(o.workloads.begin(), o.workloads.end(),
                                [](const std::string& w) { return w != "w5"; });
  const std::string slices =
      o.slices > 1 ? std::to_string(o.slices) + " interleaved slices" : "not interleaved";
  std::printf("turnstile bench: server %s, ZooKeeper %s (fsync %s), %.1f s per workload side "
              "(w1..w3: %s), %.1f s warm-up%s\n",
              o.server.c_str(), o.zk.c_str(), Fsync(o), o.duration.count() / 1000.0,
              slices.c_str(), warm ? o.warmup.count() / 1000.0 : 0.0, o.quick ? " (--quick)" : "");
  std::string error;
  if (!CheckServer(o, Millis(10000), &error)) {
    std::fprintf(stderr, "turnstile bench: %s\n", error.c_str());
    return 1;
  }
  Mntr mntr;
  if (!ReadMntr(o.zk, &mntr, &error)) {
    std::fprintf(stderr, "turnstile bench: ZooKeeper mntr at %s: %s\n", o.zk.c_str(),
                 error.c_str());
    return 1;
  }
  auto version = mntr.find("zk_version");
  std::printf("ZooKeeper %s; client cores %u\n",
              version == mntr.end() ? "?" : version->second.substr(0, version->second.find(',')).c_str(),
              std::thread::hardware_concurrency());
  std::fflush(stdout);
  // The secure sides matter only to w1..w3.
  const bool secure = !o.secure.empty() &&
                      std::any_of(o.workloads.begin(), o.workloads.end(), [](const std::string& w) {
                        return w == "w1" || w == "w2" || w == "w3";
                      });
  std::vector<SecureCheck> checks;
  if (secure) checks = CheckSecureServers(o);
  if (warm) RunWarmup(o);
  if (warm && secure) WarmSecureServers(o, o.warmup / 4);

  bool ok = true;
  bool violated = false;
  for (const std::string& w : o.workloads) {
    if (w == "w1") ok &= RunSeparateLocks(o, "w1", 1);
    if (w == "w2") ok &= RunW2(o);
    if (w == "w3") ok &= RunSeparateLocks(o, "w3", o.w3_clients);
    if (secure && w == "w1") ok &= RunSecurity(o, "w1", 1, false, checks);
    if (secure && w == "w2") ok &= RunSecurity(o, "w2", o.w2_clients, true, checks);
    if (secure && w == "w3") ok &= RunSecurity(o, "w3", o.w3_clients, false, checks);
    if (w == "w4") ok &= RunW4(o);
    if (w == "w6") ok &= RunW6(o);
    if (w == "w5") {
      const int w5 = RunW5(o);
      ok &= w5 == 0;
      violated |= w5 == 3;
    }
  }
  std::printf("\nturnstile bench: %s\n",
              violated ? "done; CORRECTNESS CHECKS FAILED (see VIOLATION above)"
              : ok     ? "done"
                       : "done, with errors (see above)");
  std::fflush(stdout);
  return violated ? 3 : ok ? 0 : 1;
}

}  // namespace turnstile::bench
