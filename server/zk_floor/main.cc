// turnstile-zk-floor: the raw-ZooKeeper floor of turnstile bench as a
// process of its own (see zk_floor.h). The bench starts it and sends one
// command per line on stdin; each command gets one reply line on stdout.
//
//   turnstile-zk-floor --zk CONNECT [--root PATH]
//
// First line out: "ready", or "error TEXT" (and exit status 1). Commands:
//   cycles TAG LOOPS MS           -> SAMPLES
//   contended TAG CLIENTS MS      -> SAMPLES
//   delete-to-watch TAG MS        -> SAMPLES
//   chain-arm TAG N               -> "ok" | "error TEXT"
//   chain-drain                   -> "ok SECONDS K V1..VK" | "error TEXT"
//   count PATH...                 -> "ok K C1..CK" | "error TEXT"
// SAMPLES is "ok CYCLES SECONDS ERRORS K C1..CK M H1..HM [TEXT]": the cycle
// and handoff samples in milliseconds, then the first error's text, if any.
// At the end of stdin the floor deletes its root and exits 0. Tags, paths
// and numbers hold no spaces.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "server/zk_floor/zk_floor.h"

namespace {

using turnstile::zk_floor::Floor;
using turnstile::zk_floor::Millis;
using turnstile::zk_floor::Samples;

// One line, flushed: the bench waits for it.
void Reply(const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

void AppendList(const std::vector<double>& values, std::string* out) {
  *out += " " + std::to_string(values.size());
  for (double v : values) *out += " " + Number(v);
}

std::string SamplesLine(const Samples& s) {
  std::string out = "ok " + std::to_string(s.cycles) + " " + Number(s.seconds) + " " +
                    std::to_string(s.errors);
  AppendList(s.cycle_ms, &out);
  AppendList(s.handoff_ms, &out);
  if (!s.error.empty()) out += " " + s.error;
  return out;
}

// A positive count or duration; false if `text` is not one.
bool Positive(const std::string& text, int64_t* out) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v <= 0 || v > (1LL << 40)) return false;
  *out = v;
  return true;
}

std::string Run(Floor& floor, const std::vector<std::string>& w) {
  const std::string& cmd = w[0];
  int64_t a = 0, b = 0;
  if (cmd == "cycles" && w.size() == 4 && Positive(w[2], &a) && Positive(w[3], &b)) {
    return SamplesLine(floor.Cycles(w[1], static_cast<int>(a), Millis(b)));
  }
  if (cmd == "contended" && w.size() == 4 && Positive(w[2], &a) && Positive(w[3], &b)) {
    return SamplesLine(floor.ContendedLock(w[1], static_cast<int>(a), Millis(b)));
  }
  if (cmd == "delete-to-watch" && w.size() == 3 && Positive(w[2], &b)) {
    return SamplesLine(floor.DeleteToWatch(w[1], Millis(b)));
  }
  if (cmd == "chain-arm" && w.size() == 3 && Positive(w[2], &a)) {
    std::string error;
    return floor.ArmChain(w[1], static_cast<int>(a), &error) ? "ok" : "error " + error;
  }
  if (cmd == "chain-drain" && w.size() == 1) {
    turnstile::zk_floor::ChainDrain d = floor.DrainChain();
    if (!d.error.empty()) return "error " + d.error;
    std::string out = "ok " + Number(d.drain_seconds);
    AppendList(d.handoff_ms, &out);
    return out;
  }
  if (cmd == "count") {
    std::vector<int> counts;
    std::string error;
    const std::vector<std::string> paths(w.begin() + 1, w.end());
    if (!floor.CountChildren(paths, &counts, &error)) return "error " + error;
    std::string out = "ok " + std::to_string(counts.size());
    for (int c : counts) out += " " + std::to_string(c);
    return out;
  }
  return "error unknown command or arguments: " + cmd;
}

}  // namespace

int main(int argc, char** argv) {
  std::string zk, root;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--zk" || arg == "--root") && i + 1 < argc) {
      (arg == "--zk" ? zk : root) = argv[++i];
    } else {
      std::fprintf(stderr, "usage: turnstile-zk-floor --zk CONNECT [--root PATH]  (commands on "
                           "stdin: see server/zk_floor/main.cc)\n");
      return 2;
    }
  }
  if (zk.empty()) {
    std::fprintf(stderr, "turnstile-zk-floor: --zk is required\n");
    return 2;
  }
  std::string error;
  std::unique_ptr<Floor> floor = Floor::Open(zk, root, &error);
  if (floor == nullptr) {
    Reply("error " + error);
    return 1;
  }
  Reply("ready");
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (words.empty()) continue;
    Reply(Run(*floor, words));
  }
  floor.reset();  // deletes the root
  return 0;
}
