// turnstile-bench: the benchmark as a standalone program (same flags as
// `turnstile bench`).
#include "client/bench/bench.h"

int main(int argc, char** argv) {
  return turnstile::bench::RunBench(argc - 1, argv + 1);
}
