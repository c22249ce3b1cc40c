// The raw-ZooKeeper floor of turnstile bench: the bench's workloads done
// directly with ZkSession (the async session turnstiled itself uses),
// without gRPC or the engine, so that a turnstile cycle can be compared with
// what ZooKeeper alone costs. It runs in a process of its own,
// turnstile-zk-floor (main.cc), which the bench starts and drives over a pipe
// (client/bench/zk_floor.cc): the bench is a client and includes nothing of
// the server, and the floor's CPU is read from its own process.
//
// Not thread-safe: one thread calls a Floor. Every ZooKeeper callback runs
// on a session's completion thread and never blocks.
#ifndef TURNSTILE_SERVER_ZK_FLOOR_ZK_FLOOR_H_
#define TURNSTILE_SERVER_ZK_FLOOR_ZK_FLOOR_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "server/zk/zk_session.h"

namespace turnstile::zk_floor {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// The raw samples of one measured slice.
struct Samples {
  uint64_t cycles = 0;  // completed within the window
  double seconds = 0;   // the window
  std::vector<double> cycle_ms;
  std::vector<double> handoff_ms;  // DeleteToWatch: delete issued -> watch fired
  uint64_t errors = 0;
  std::string error;  // the first one
};

// A drained chain (W4's floor): each successor's watch fired, measured from
// its predecessor's delete being issued.
struct ChainDrain {
  std::vector<double> handoff_ms;
  double drain_seconds = 0;  // first delete done -> last delete done
  std::string error;         // "" = drained
};

struct ChainState;  // zk_floor.cc

class Floor {
 public:
  // Connects two sessions (the second only watches, for W2's delete->watch
  // latency) and, unless `root` is "", creates the persistent node `root`
  // under which every workload works.
  static std::unique_ptr<Floor> Open(const std::string& zk_connect, const std::string& root,
                                     std::string* error);
  ~Floor();  // deletes the whole root, then closes the sessions
  Floor(const Floor&) = delete;
  Floor& operator=(const Floor&) = delete;

  // The cycle workloads measure one slice each: called again with the same
  // tag, they reuse the parent nodes (every node of a slice is gone when it
  // returns without errors).
  //
  // W1/W3: `loops` concurrent create(ephemeral-sequential)+getChildren+delete
  // cycles on one session (as a replica multiplexes its clients), loop i
  // under its own parent, for `duration`.
  Samples Cycles(const std::string& tag, int loops, Millis duration);
  // W2 throughput: `clients` contend for one raw lock on one session (create
  // ES, list once, watch the predecessor with getData, delete when first),
  // hold time 0.
  Samples ContendedLock(const std::string& tag, int clients, Millis duration);
  // W2 handoff floor: one session creates a node, the other watches it with
  // getData; latency = delete issued -> watch fired (handoff_ms). Repeated
  // for `duration`.
  Samples DeleteToWatch(const std::string& tag, Millis duration);
  // W4 floor, in two steps so that the bench can read ZooKeeper's counters
  // between them: ArmChain creates a chain of n+1 sequential nodes on one
  // session, each watched (getData) by its successor; DrainChain deletes the
  // first, and each successor deletes itself when its watch fires, giving n
  // handoffs. REQUIRES: DrainChain follows a successful ArmChain.
  bool ArmChain(const std::string& tag, int n, std::string* error);
  ChainDrain DrainChain();

  // Children of each node in `paths` (a missing node counts 0); false +
  // *error if ZooKeeper cannot be asked.
  bool CountChildren(const std::vector<std::string>& paths, std::vector<int>* counts,
                     std::string* error);

 private:
  Floor() = default;
  // Creates the persistent node `path` unless this Floor already did.
  bool Ensure(const std::string& path, std::string* error);

  std::set<std::string> made_;
  std::unique_ptr<ZkSession> zk_;
  std::unique_ptr<ZkSession> watcher_;
  std::string root_;
  std::shared_ptr<ChainState> chain_;  // between ArmChain and DrainChain
};

}  // namespace turnstile::zk_floor

#endif  // TURNSTILE_SERVER_ZK_FLOOR_ZK_FLOOR_H_
