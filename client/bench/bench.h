// turnstile bench: measures a running turnstiled replica against the raw
// ZooKeeper floor it is built on, in the same run.
//
//   turnstile bench [--server 127.0.0.1:7400] [--zk 127.0.0.1:2181]
//                   [--zk-root /turnstile] [--zk-fsync on|off]
//                   [--server-pid PID] [--workloads w1,w2,w3,w4,w5]
//                   [--duration 5s] [--warmup 3s] [--slices 4]
//                   [--herd-sizes 10,100,1000,10000]
//                   [--w5-waiters 20000] [--w5-idle 5s]
//                   [--w5-restart-zk CMD] [--bare-server PATH] [--quick]
//                   [--metrics 127.0.0.1:9464]
//                   [--secure-server LABEL=ADDRESS,ca=FILE[,cert=FILE,key=FILE]
//                                    [,server-name=NAME][,pid=PID][,rules=N]]...
//
// Workloads:
//   w1  uncontended: 1 client, 1 lock, acquire+release cycles.
//   w2  contended: 16 clients, 1 lock, hold time 0; handoff latency is the
//       previous holder's RELEASED event to the next holder's ACQUIRED event.
//   w3  many locks: 32 clients, each on its own lock.
//   w4  herd: N waiters queued behind one holder, then drained; per-handoff
//       latency, drain rate, and ZooKeeper packets and watch notifications
//       per handoff (deltas of the server's `mntr`).
//   w5  scale: N streams waiting on one replica (half on one lock, half over
//       100 locks, plus 10 reference locks with 10 waiters), every lock first
//       taken by one holder; the replica's RSS and idle CPU (--server-pid),
//       ZooKeeper's watch count, then the drain: the big lock's handoffs
//       against the reference locks'. Correctness is checked every run: one
//       node per contender while all wait, each contender granted once, in
//       fencing-token order per lock, never before the previous holder's
//       release, and no node left under the lock nodes after the drain.
//       With --w5-restart-zk CMD, CMD (a shell command that restarts
//       ZooKeeper on the same address and data) runs while all wait; then
//       the same ZooKeeper sessions must own the contender nodes (none
//       expired), zk_watch_count must return to its value before the
//       restart (every watch re-established; the time is reported), holders
//       may be SUSPENDED and RESUMED but not LOST, and waiters are told
//       nothing but QUEUED. Before all that, the baseline for the
//       replica's memory: --bare-server (turnstile-bare-server, gRPC with the
//       same proto and no engine) holds the same number of idle streams,
//       opened the same way, and the replica's RSS is reported over its RSS
//       (target <= 1.15; gRPC alone costs ~17 KB per waiting call).
//   w6  scrape cost (only when named): W2 while --w5-waiters wait on 100
//       other locks of the replica (each held), in slices interleaved
//       quiet and with a scrape of --metrics every 100 ms; reports the
//       handoff p99 scraped over quiet (target <= 1.2) and the scrapes'
//       duration.
// With --secure-server (security.h), W1..W3 also run over plaintext and
// over each such replica (TLS, mutual TLS, mutual TLS with a policy of N
// rules), interleaved, each reported as a ratio to plaintext and the
// largest policy over the smallest ("wN-security" tables and JSON lines).
// W1..W4 also run a raw-ZooKeeper floor (turnstile-zk-floor: ZkSession, no
// gRPC, in a process of its own) and print
// turnstile/floor per metric. Each workload prints a table and one line
// "BENCH_JSON {...}"; each heading and JSON line names --zk-fsync.
//
// The comparison is kept fair to both sides: before the first of W1..W4,
// both run unmeasured cycles for --warmup (ZooKeeper's JIT and the replica
// warm up); W1..W3 measure each side in --slices slices interleaved with the
// other side's (ABBA, ABBABAAB, ...), merged per side; W4 (one drain per N
// and side) alternates which side drains first from one N to the next.
//
// W4 with N waiters needs the replica to accept N+1 contenders on one lock,
// W5 N/2+1, N+211 streams and a watch budget for all of them, which is per
// ZooKeeper session (one lock's contenders share one): run turnstiled with
// --max-contenders-per-lock 20001, --max-streams 25000, --zk-sessions 4 and
// --max-watch-bytes 921600 for the defaults, and for --w5-restart-zk a
// session timeout that outlasts the restart (--zk-session-timeout 30s);
// deploy/local/bench.sh does.
//
// Exit codes: 0 every workload ran and passed its checks; 1 a workload
// failed to run (the table and JSON say which; the others still run), or a
// --secure-server is not what it says; 2 usage; 3 a W5 correctness check
// failed.
#ifndef TURNSTILE_CLIENT_BENCH_BENCH_H_
#define TURNSTILE_CLIENT_BENCH_BENCH_H_

namespace turnstile::bench {

// `argv` excludes the program name and the word "bench". Prints to stdout
// (tables, BENCH_JSON lines) and stderr (errors, usage).
int RunBench(int argc, char** argv);

}  // namespace turnstile::bench

#endif  // TURNSTILE_CLIENT_BENCH_BENCH_H_
