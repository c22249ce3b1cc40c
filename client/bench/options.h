// turnstile bench: its flags, parsed by client/common's FlagSet (each flag
// also read from its TURNSTILE_* environment variable; a flag wins), into
// BenchOptions. Not thread-safe: parse once, at start.
#ifndef TURNSTILE_CLIENT_BENCH_OPTIONS_H_
#define TURNSTILE_CLIENT_BENCH_OPTIONS_H_

#include <string>

#include "client/bench/bench_internal.h"

namespace turnstile::bench {

// `argv` excludes the program name and the word "bench". Returns 0 with *o
// complete (--quick's shorter defaults applied, the slices clamped, the
// sibling programs found), 2 after printing a usage error to stderr, or -1
// after printing the usage to stdout (--help).
int ParseFlags(int argc, char** argv, BenchOptions* o);

}  // namespace turnstile::bench

#endif  // TURNSTILE_CLIENT_BENCH_OPTIONS_H_
