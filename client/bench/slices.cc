// turnstile bench: the order in which W1..W3 interleave the two sides' slices.
#include "client/bench/slices.h"

#include <bitset>
#include <cstdint>
#include <functional>
#include <string>

namespace turnstile::bench {

// Whether slot `slot` of the interleaved order is the turnstile side's.
bool TurnstileSlot(int slot) {
  return std::bitset<32>(static_cast<uint32_t>(slot)).count() % 2 == 0;
}

// "ABBABAAB" for 4 slices per side.
std::string SliceOrder(int slices) {
  std::string order;
  for (int slot = 0; slot < 2 * slices; ++slot) order += TurnstileSlot(slot) ? 'A' : 'B';
  return order;
}

// Runs `slices` slices of each side in SliceOrder; each callback measures
// one slice (its argument: how many of its side ran before it) and returns
// false on an error, after which its side runs no more slices (they would
// fail too, and a failed contended floor slice may leave nodes that would
// stall the next).
void Interleave(int slices, const std::function<bool(int)>& turnstile,
                const std::function<bool(int)>& floor) {
  bool turnstile_ok = true, floor_ok = true;
  int turnstile_done = 0, floor_done = 0;
  for (int slot = 0; slot < 2 * slices; ++slot) {
    if (TurnstileSlot(slot)) {
      if (turnstile_ok) turnstile_ok = turnstile(turnstile_done++);
    } else {
      if (floor_ok) floor_ok = floor(floor_done++);
    }
  }
}

// The length of one slice of W1..W3.
Millis SliceLength(const BenchOptions& o) { return o.duration / o.slices; }

}  // namespace turnstile::bench
