// turnstiled: one stateless replica of the turnstile lock service.
#include <csignal>
#include <cstdio>
#include <pthread.h>

#include "absl/synchronization/mutex.h"
#include "client/common/flags.h"
#include "server/replica.h"

int main(int argc, char** argv) {
  // Debian's Abseil is built without NDEBUG, so by default absl::Mutex
  // checks every acquisition against a graph of lock orders (deadlock
  // detection): GraphCycles showed in a W1 profile of the replica on both
  // of its busy threads. The tests keep the check (they run the engine
  // in-process, where a lock-order cycle aborts); the replica does not pay
  // for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  turnstile::ReplicaConfig config;
  turnstile::FlagSet flags("turnstiled");
  config.Register(&flags);
  bool help = false;
  auto args = flags.Parse(argc, argv, &help);
  if (help) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (!args.ok()) {
    std::fprintf(stderr, "turnstiled: %s\n", std::string(args.status().message()).c_str());
    return 2;
  }
  if (!args->empty()) {
    std::fprintf(stderr, "turnstiled: unexpected argument \"%s\"\n", (*args)[0].c_str());
    return 2;
  }
  // Block the stop signals in every thread; main waits for them below.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);  // reload --authz-file, the CRL, the TLS pair and client CA
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  auto replica = turnstile::Replica::Start(config);
  if (!replica.ok()) {
    std::fprintf(stderr, "turnstiled: %s\n", std::string(replica.status().message()).c_str());
    return 1;
  }
  std::printf("turnstiled %s listening on %s (ZooKeeper %s, root %s)\n",
              (*replica)->config().replica_id.c_str(), (*replica)->address().c_str(),
              config.zk.c_str(), config.zk_root.c_str());
  std::fflush(stdout);
  int sig = 0;
  while (sigwait(&stop, &sig) == 0 && sig == SIGHUP) {
    const bool policy = (*replica)->ReloadPolicy();
    const bool crl = (*replica)->ReloadCrl();
    const bool tls = (*replica)->ReloadTls();
    std::printf("turnstiled: SIGHUP: %s; %s; %s\n",
                policy ? "authz policy reloaded"
                       : "no new authz policy (unchanged, invalid -- see stderr -- or none)",
                crl ? "client CRL reloaded"
                    : "no new client CRL (unchanged, invalid -- see stderr -- or none)",
                tls ? "TLS certificate or client CA reloaded"
                    : "no new TLS certificate or client CA (unchanged, invalid -- see stderr -- "
                      "or none)");
    std::fflush(stdout);
  }
  std::printf("turnstiled: signal %d, draining (up to %s)\n", sig,
              turnstile::FormatDuration(config.drain_timeout).c_str());
  std::fflush(stdout);
  (*replica)->Drain();
  std::printf("turnstiled: stopped\n");
  return 0;
}
