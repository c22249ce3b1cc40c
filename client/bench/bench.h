// turnstile bench: measures a running turnstiled replica against the raw
// ZooKeeper floor it is built on, in the same run.
//
//   turnstile bench [--server 127.0.0.1:7400] [--zk 127.0.0.1:2181]
//                   [--workloads w1,w2,w3,w4] [--duration 5s]
//                   [--herd-sizes 10,100,1000] [--quick]
//
// Workloads:
//   w1  uncontended: 1 client, 1 lock, acquire+release cycles.
//   w2  contended: 16 clients, 1 lock, hold time 0; handoff latency is the
//       previous holder's RELEASED event to the next holder's ACQUIRED event.
//   w3  many locks: 32 clients, each on its own lock.
//   w4  herd: N waiters queued behind one holder, then drained; per-handoff
//       latency, and ZooKeeper packets and watch notifications per handoff
//       (deltas of the server's `mntr`).
// Every workload also runs a raw-ZooKeeper floor (ZkSession, no gRPC) and
// prints turnstile/floor per metric. Each workload prints a table and one line
// "BENCH_JSON {...}".
//
// W4 with N waiters needs the replica to accept N+1 contenders on one lock:
// run turnstiled with --max-contenders-per-lock above the largest herd size
// (e.g. 2000 for the default sizes; the default limit is 1000).
//
// Exit codes: 0 every workload ran; 1 a workload failed (the table and JSON
// say which; the others still run); 2 usage.
#ifndef TURNSTILE_CLIENT_BENCH_BENCH_H_
#define TURNSTILE_CLIENT_BENCH_BENCH_H_

namespace turnstile::bench {

// `argv` excludes the program name and the word "bench". Prints to stdout
// (tables, BENCH_JSON lines) and stderr (errors, usage).
int RunBench(int argc, char** argv);

}  // namespace turnstile::bench

#endif  // TURNSTILE_CLIENT_BENCH_BENCH_H_
