// Internals of turnstile bench: options, statistics, results, and the two
// sides of every workload (turnstile over gRPC; the raw-ZooKeeper floor,
// which the turnstile-zk-floor program runs over ZkSession). Not a public
// API.
#ifndef TURNSTILE_CLIENT_BENCH_BENCH_INTERNAL_H_
#define TURNSTILE_CLIENT_BENCH_BENCH_INTERNAL_H_

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <vector>

#include "client/json_quote.h"

namespace grpc {
class ChannelCredentials;
}

namespace turnstile::bench {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Another replica over which W1..W3 also run, interleaved with --server's
// plaintext (--secure-server): the same ZooKeeper and flags, only its
// transport security and policy differ, so the ratio to plaintext is their
// cost.
struct SecureServer {
  std::string label;        // names its column and JSON object
  std::string address;
  std::string ca_file;      // PEM CAs of its server certificate (TLS)
  std::string cert_file;    // with key_file: the bench's client certificate
  std::string key_file;     //   (mutual TLS)
  std::string server_name;  // the name its certificate carries; "" = the host
  int pid = 0;              // for its CPU per cycle; 0 = not known
  // Rules in its --authz-file (0 = no policy): the policy must let the
  // bench's identity acquire every lock whose name starts "bench-" and
  // refuse "probe-denied-..." (the bench checks both).
  int policy_rules = 0;
  bool mtls() const { return !cert_file.empty(); }
};

struct BenchOptions {
  std::string server = "127.0.0.1:7400";
  std::string zk = "127.0.0.1:2181";
  // The replica's --zk-root: W5 lists its lock nodes there after the drain.
  std::string zk_root = "/turnstile";
  // Whether ZooKeeper fsyncs its log ("on", "off"): a label for the tables
  // and JSON only; the bench cannot see ZooKeeper's forceSync.
  std::string zk_fsync = "unknown";
  // The replica's process id, for W5's RSS and CPU (/proc); 0 = not known.
  int server_pid = 0;
  // The replica's /metrics (--metrics-listen): W6 scrapes it.
  std::string metrics = "127.0.0.1:9464";
  // ZooKeeper's process id, for its CPU per cycle in W1..W3; 0 = not known.
  int zk_pid = 0;
  std::vector<std::string> workloads = {"w1", "w2", "w3", "w4", "w5"};
  Millis duration{5000};
  // Unmeasured cycles on both sides before the first measured workload
  // (ZooKeeper's JIT and the replica warm up; without it the first
  // workload's turnstile side, measured first, pays for it).
  Millis warmup{3000};
  // W1..W3 split each side's `duration` into this many slices, run
  // interleaved with the other side's (see slices.h).
  int slices = 4;
  std::vector<int> herd_sizes = {10, 100, 1000, 10000};
  bool quick = false;

  // Fixed shapes (the workloads).
  int w2_clients = 16;
  int w3_clients = 32;
  // Channels (connections) the W4 waiters are spread over.
  int w4_channels = 16;
  // W5: waiters (half on one lock, half over w5_spread_locks locks), the
  // idle window for the CPU reading, and the channels they are spread over.
  int w5_waiters = 20000;
  Millis w5_idle{5000};
  int w5_channels = 64;
  int w5_spread_locks = 100;
  // The reference: locks with this few waiters, drained one after another
  // in the same run, against which the big lock's handoffs are compared.
  int w5_control_locks = 10;
  int w5_control_waiters = 10;
  // W5: a shell command (run with sh -c) that restarts the replica's
  // ZooKeeper on the same address and data dir and returns once it serves
  // again; run while all waiters wait, after the idle measurement. "" = no
  // restart. The bench then checks that nothing was lost and that every
  // watch came back (see ScaleRestart).
  std::string w5_restart_zk;
  // W5's baseline: the turnstile-bare-server program (gRPC alone, same
  // proto), started by W5 to hold as many idle Acquire streams as the
  // replica does; "" = not measured. Defaults to turnstile-bare-server next
  // to the running program, if there is one.
  std::string bare_server;
  // The floor's program (turnstile-zk-floor, next to the running program):
  // W1..W4's floor sides and W5's node counts talk to ZooKeeper through it.
  std::string zk_floor;
  // W1..W3 also over these (TLS, mutual TLS, a policy), interleaved with a
  // plaintext side on `server` (see security.cc).
  std::vector<SecureServer> secure;
  // Unique per run: lock names and the floor's znode root carry it.
  std::string run_tag;
};

// --- statistics -----------------------------------------------------------

double ToMs(Clock::duration d);

struct Latency {
  size_t count = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double mean_ms = 0;
  double max_ms = 0;
  double min_ms = 0;
};
// Nearest-rank percentiles.
Latency Summarize(std::vector<double> samples_ms);

// --- The replica's batched writes (issue 39) --------------------------------

// Its counters from one scrape of its /metrics (o.metrics); ok false if the
// scrape failed (a replica without metrics: nothing is reported).
struct BatchCounters {
  bool ok = false;
  double create_batches = 0, batched_creates = 0, largest_create = 0;
  double delete_batches = 0, batched_deletes = 0, largest_delete = 0;
};
BatchCounters ScrapeBatchCounters(const std::string& metrics_address);

// --- ZooKeeper four-letter words --------------------------------------------

// Sends `cmd` (e.g. "mntr") to the first server of a ZooKeeper connect string
// ("h1:p1,h2:p2/chroot") and returns the whole reply; "" + *error on failure.
std::string FourLetterWord(const std::string& zk_connect, const std::string& cmd,
                           Millis timeout, std::string* error);
// `mntr` as key -> value (numbers as text).
using Mntr = std::map<std::string, std::string>;
bool ReadMntr(const std::string& zk_connect, Mntr* out, std::string* error);
// A numeric mntr value (0 if absent or not a number).
double MntrValue(const Mntr& m, const std::string& key);
// Polls `mntr` until `key` reaches `at_least` or `deadline` passes; *out
// holds the last reading either way. False only if mntr cannot be read.
bool ReadMntrWhen(const std::string& zk_connect, const std::string& key, double at_least,
                  std::chrono::steady_clock::time_point deadline, Mntr* out, std::string* error);

// The counters W4 reads, as deltas between two mntr snapshots.
struct ZkCounters {
  double packets = 0;        // zk_packets_received + zk_packets_sent
  double notifications = 0;  // zk_sum_node_deleted_watch_count +
                             // zk_sum_node_changed_watch_count
  double deleted_watches = 0;
  double changed_watches = 0;
};
ZkCounters CounterDelta(const Mntr& before, const Mntr& after);

// --- the replica process (Linux /proc) ---------------------------------------

// VmRSS of process `pid` in bytes; -1 if it cannot be read.
int64_t ProcessRssBytes(int pid);
// utime + stime of process `pid` in seconds; -1 if it cannot be read.
double ProcessCpuSeconds(int pid);
// Context switches (voluntary + involuntary) of all of process `pid`'s
// threads (/proc/PID/task/*/status; a thread that ended is not counted, so
// a reading is per slice, with the same threads alive at both ends); -1 if
// it cannot be read.
int64_t ProcessContextSwitches(int pid);

// CPU and context switches of the processes a cycle workload runs through,
// summed over one side's slices (W1..W3). The sides' slices run one after
// the other, so each process's delta over a slice belongs to that side.
struct SideUsage {
  struct Process {
    double cpu_s = 0;
    int64_t switches = 0;
    bool known = true;  // false once a reading failed (no pid, or gone)
  };
  Process server;  // turnstiled (the turnstile side only)
  Process self;    // this process (turnstile's client side), or the floor's
  Process zk;      // ZooKeeper
};

// Measures SideUsage around slices.
class UsageMeter {
 public:
  explicit UsageMeter(const BenchOptions& o) : o_(o) {}
  // Runs `fn` and adds each process's usage over it to `into`; `server`:
  // whether the replica's usage belongs to this side; `self_pid`: the
  // side's own process (0 = this one; the floor's is turnstile-zk-floor).
  template <typename F>
  auto Measure(SideUsage* into, bool server, F&& fn, int self_pid = 0) {
    const Snapshot before = Take(self_pid);
    auto result = fn();
    Add(before, Take(self_pid), server, into);
    return result;
  }

 private:
  struct Snapshot {
    double cpu[3] = {-1, -1, -1};
    int64_t switches[3] = {-1, -1, -1};
  };
  Snapshot Take(int self_pid) const;
  static void Add(const Snapshot& a, const Snapshot& b, bool server, SideUsage* into);
  const BenchOptions& o_;
};

// --- results ----------------------------------------------------------------

// Repeated acquire+release cycles (W1, W2, W3) — or create+getChildren+delete
// cycles for the floor.
struct CycleResult {
  uint64_t cycles = 0;  // completed within the measured window
  double seconds = 0;   // the window
  double per_second = 0;
  Latency cycle;        // one cycle, start to end
  // Handoffs (W2): previous holder's RELEASED -> next holder's ACQUIRED,
  // negative values counted as 0 ms (the next holder can be told before the
  // previous one: RELEASED is sent only after the delete's reply, while the
  // next waiter's watch fires before it).
  Latency handoff;
  Latency handoff_signed;  // the same, not clamped
  uint64_t acquired_before_released = 0;
  // Previous holder sends `release` -> next holder's ACQUIRED: the analogue
  // of the floor's "delete issued -> watch fired".
  Latency release_to_acquired;
  uint64_t errors = 0;
  std::string error;  // the first one
};

// The raw samples of one measured slice of a cycle workload, or of several
// merged: W1..W3 measure each side in slices interleaved with the other
// side's, and a side's result is its slices merged (cycles and measured
// time summed, samples pooled) and then summarized.
struct CycleSamples {
  uint64_t cycles = 0;  // completed within the measured windows
  double seconds = 0;   // the windows, summed
  std::vector<double> cycle_ms;
  // Handoffs (W2; the floor's delete -> watch), paired within one slice.
  std::vector<double> handoff_ms;         // clamped at 0
  std::vector<double> handoff_signed_ms;  // turnstile only
  std::vector<double> release_to_acquired_ms;
  uint64_t acquired_before_released = 0;
  uint64_t errors = 0;
  std::string error;  // the first one
  int slices = 0;     // merged so far
  std::vector<double> slice_rates;  // cycles/s of each slice merged, in order

  // Adds `slice` to these samples.
  void Merge(CycleSamples&& slice);
  CycleResult Result() const;
};

// One W4 drain: N waiters behind one holder (or a raw chain of N+1 nodes).
struct HerdResult {
  int n = 0;
  uint64_t handoffs = 0;
  Latency handoff;          // RELEASED -> next ACQUIRED, clamped at 0 (floor:
                            // delete issued -> watch fired)
  Latency handoff_signed;   // turnstile: not clamped
  Latency release_to_acquired;  // turnstile: `release` sent -> next ACQUIRED
  double drain_seconds = 0;
  double handoffs_per_second = 0;
  ZkCounters zk;  // totals over the drain
  double packets_per_handoff = 0;
  double notifications_per_handoff = 0;
  // gRPC QUEUED events the waiters received during the drain, per handoff
  // (turnstile only: position updates to waiters still in line).
  double queued_events_per_handoff = 0;
  uint64_t acquired_before_released = 0;
  std::string error;
};

// One contender's grant as its Acquire stream saw it.
struct Grant {
  uint64_t token = 0;
  Clock::time_point acquired_at{}, released_at{}, release_sent_at{};
};

// Handoff samples of drained locks (W4: one; W5: several).
class DrainSamples {
 public:
  // One lock's grants, its first holder's included; each grant after the
  // first (in fencing-token order) is a handoff from the one before.
  void AddLock(std::vector<Grant> grants);
  // Fills handoff, handoff_signed, release_to_acquired, handoffs, drain
  // seconds and rate. The drain time is the sum of the locks' drains (first
  // release to last) when they ran one after another, or the span from the
  // first release to the last when they ran `at_once`.
  void Fill(bool at_once, HerdResult* r) const;

 private:
  std::vector<double> handoff_, signed_, from_release_;
  uint64_t acquired_before_released_ = 0;
  double busy_seconds_ = 0;
  bool any_ = false;
  Clock::time_point first_{}, last_{};
};

// W5's ZooKeeper restart (--w5-restart-zk) while all waiters wait: the
// replica must come back on the same sessions (none expired), so that every
// waiter keeps its place and its watch.
struct ScaleRestart {
  std::string command;
  int exit_status = -1;             // of `command` (sh -c); 0 = restarted
  double command_seconds = NAN;     // the command, start to end
  // mntr zk_uptime at the first reading after the command: under the time
  // since the command began, or ZooKeeper was not restarted.
  double zk_uptime_seconds = NAN;
  double watches_before = NAN;      // mntr zk_watch_count just before
  double watches_after = NAN;       // ... once back (or at the deadline)
  // From the command's start (and from its end: ZooKeeper serving again)
  // until zk_watch_count was back at watches_before; NAN if it never was.
  double watches_back_seconds = NAN;
  double watches_back_after_up_seconds = NAN;
  // ZooKeeper sessions owning the contender nodes of W5's locks (`dump`),
  // before and after: the same sessions with the same number of nodes each
  // means no session of the replica's pool expired.
  int sessions_before = 0;
  int sessions_after = 0;
  bool sessions_same = false;
  int64_t nodes_before = 0;  // contender nodes they own
  int64_t nodes_after = 0;
  // Events the holders got (SUSPENDED and RESUMED are expected: every
  // session of the pool was disconnected; LOST is a violation), and waiters
  // told anything but QUEUED before the drain (a violation).
  int holders_suspended = 0;
  int holders_resumed = 0;
  int holders_lost = 0;
  int waiters_other_events = 0;
  // Every check above ran (false: the run stopped first, e.g. the command
  // failed; the values after it are not measured).
  bool checked = false;
};

// W5's baseline (issue 20): turnstile-bare-server, gRPC with the same proto
// and no engine, holding as many idle Acquire streams as W5 puts on the
// replica (holders and waiters, same channels, same open requests), each
// answered with one QUEUED; its RSS is what gRPC alone costs for them.
struct BareGrpcResult {
  int pid = 0;
  int streams = 0;
  double open_seconds = NAN;    // all streams started -> each one QUEUED
  double rss_before_mb = NAN;   // listening, channels connected, no stream
  double rss_waiting_mb = NAN;  // all streams idle, after W5's idle window
  // How the server ended: its exit status after SIGTERM (0 = clean),
  // 128 + signal if it had to be killed, -1 if never started.
  int exit_status = -1;
  std::string error;  // the baseline could not be measured
};

// W5: many waiters on one replica at once, then drained.
struct ScaleResult {
  int big_waiters = 0;       // on the one big lock
  int spread_locks = 0;      // the other half, over this many locks
  int spread_waiters = 0;
  int control_locks = 0;     // the reference locks
  int control_waiters = 0;   // per reference lock
  int waiters = 0;           // all of them
  int holders = 0;           // one per lock
  double queue_seconds = NAN;     // all waiters started -> each one QUEUED
  double rss_before_mb = NAN;     // before any stream was opened
  double rss_waiting_mb = NAN;    // while all wait
  double idle_seconds = NAN;
  double cpu_idle_percent = NAN;  // of one core, while all wait
  double watch_count = NAN;       // mntr zk_watch_count while all wait
  double watch_delta = NAN;       // ... minus its value before the run
  std::optional<ScaleRestart> restart;  // with --w5-restart-zk
  std::optional<BareGrpcResult> bare;   // with a bare server (--bare-server)
  HerdResult big, control, spread;
  uint64_t grants_checked = 0;
  int lock_nodes_checked = 0;
  int64_t nodes_left = 0;  // contender nodes found after the drain
  // Correctness violations (double grants, grants out of order, two
  // holders at once, nodes left behind); at most a few are kept.
  std::vector<std::string> violations;
  uint64_t violation_count = 0;
  std::string error;  // the run itself failed (nothing to check)
};

// --- the turnstile side (gRPC, plain stubs) ------------------------------------

// Checks that the replica answers (channel connects within `timeout`).
bool CheckServer(const BenchOptions& o, Millis timeout, std::string* error);

// Where the turnstile side connects: the address and the channel
// credentials (plaintext unless set), and the name its certificate carries.
struct Endpoint {
  std::string address;
  std::shared_ptr<grpc::ChannelCredentials> creds;  // null = plaintext
  std::string server_name;                          // "" = the address's host
};
// The endpoint of `s`, or why its files do not make credentials.
bool SecureEndpoint(const SecureServer& s, Endpoint* out, std::string* error);

// `clients` concurrent clients, one channel (connection) each; client i
// loops acquire+release (hold 0) on lock_names[i]. W1: 1 client; W2: 16 on
// one name; W3: 32 on 32 names. The channels stay open from one Run (slice)
// to the next, so every slice measures the same connections.
class TurnstileCycles {
 public:
  TurnstileCycles(const BenchOptions& o, std::vector<std::string> lock_names);
  // The same against `endpoint` (a --secure-server, or plaintext).
  TurnstileCycles(const Endpoint& endpoint, std::vector<std::string> lock_names);
  ~TurnstileCycles();
  TurnstileCycles(const TurnstileCycles&) = delete;
  TurnstileCycles& operator=(const TurnstileCycles&) = delete;

  // Connects every channel (10 s in all); false + *error if not.
  bool Connect(std::string* error);
  // One slice: every client starts its loop, none starts a cycle after
  // `duration`, and Run returns once every stream of the slice has ended.
  // With one lock name, handoffs are paired (by fencing token) among this
  // slice's grants only: the first grant of a slice follows no release.
  CycleSamples Run(Millis duration);

  struct Conns;

 private:
  std::shared_ptr<Conns> conns_;
  bool broken_ = false;  // a slice's streams did not end: run no more
};

// W4: one holder, N waiters queued, then drained with hold time 0.
HerdResult RunTurnstileHerd(const BenchOptions& o, const std::string& lock_name,
                            int n);

// W5: every lock taken by one holder, then o.w5_waiters (plus the reference
// locks' waiters) queued at once over o.w5_channels channels; measured while
// they wait, drained (reference locks one by one, the big lock, then the
// spread locks at once) and checked. `lock_prefix` starts every lock name.
ScaleResult RunTurnstileScale(const BenchOptions& o, const std::string& lock_prefix);

// --- the floor side (turnstile-zk-floor) --------------------------------------

class FloorProcess;

// The floor's workloads, run by a turnstile-zk-floor process of this Floor's
// own (server/zk_floor): the bench holds no ZooKeeper session itself.
class Floor {
 public:
  // Starts o.zk_floor, which connects two sessions (the second only
  // watches, for W2's delete->watch latency) and creates the persistent
  // root /turnstile-bench-floor-<tag>.
  static std::unique_ptr<Floor> Open(const BenchOptions& o, std::string* error);
  ~Floor();  // the process deletes the whole root, closes its sessions, exits
  Floor(const Floor&) = delete;
  Floor& operator=(const Floor&) = delete;

  // The cycle workloads measure one slice each: called again with the same
  // tag, they reuse the parent nodes (every node of a slice is gone when it
  // returns without errors).
  //
  // W1/W3: `loops` concurrent create(ephemeral-sequential)+getChildren+delete
  // cycles on one session (as a replica multiplexes its clients), loop i
  // under its own parent, for `duration`.
  CycleSamples Cycles(const std::string& tag, int loops, Millis duration);
  // W2 throughput: `clients` contend for one raw lock on one session (create
  // ES, list once, watch the predecessor with getData, delete when first),
  // hold time 0.
  CycleSamples ContendedLock(const std::string& tag, int clients, Millis duration);
  // W2 handoff floor: one session creates a node, the other watches it with
  // getData; latency = delete issued -> watch fired (handoff_ms). Repeated
  // for `duration`.
  CycleSamples DeleteToWatch(const std::string& tag, Millis duration);
  // W4 floor: a chain of n+1 sequential nodes on one session, each watched
  // (getData) by its successor; deleting the first, and each successor
  // deleting itself when its watch fires, gives n handoffs.
  // ZooKeeper's counters (mntr) are read by the bench around the drain.
  HerdResult Chain(const std::string& tag, int n);

  const std::string& root() const { return root_; }
  // The floor's process: the floor side's CPU and context switches are its.
  int pid() const;

 private:
  Floor() = default;
  // One measured slice: `command`, whose workload runs for `duration`.
  CycleSamples Slice(const std::string& command, Millis duration);

  std::unique_ptr<FloorProcess> process_;
  std::string root_;
  std::string zk_connect_;
};

// Children of each ZooKeeper node in `paths` (a missing node counts 0), read
// by a turnstile-zk-floor process with a session of its own; false + *error
// if ZooKeeper cannot be asked.
bool CountChildren(const BenchOptions& o, const std::vector<std::string>& paths,
                   std::vector<int>* counts, std::string* error);

// --- output -----------------------------------------------------------------

// A tiny JSON object writer: {"k":v,...} with nested objects and arrays.
class Json {
 public:
  Json& Str(const std::string& key, const std::string& value);
  Json& Num(const std::string& key, double value);  // null if not finite
  Json& Int(const std::string& key, int64_t value);
  Json& Obj(const std::string& key, const Json& value);
  Json& Arr(const std::string& key, const std::vector<Json>& values);
  Json& Null(const std::string& key);
  std::string Text() const;

 private:
  void Key(const std::string& key);
  std::string body_;
};

}  // namespace turnstile::bench

#endif  // TURNSTILE_CLIENT_BENCH_BENCH_INTERNAL_H_
