// Lock-name validation, encoding and decoding. Invariants checked:
// a valid name encodes to a segment that decodes back to it; a segment
// that decodes re-encodes to itself (the encoding is canonical); every
// encoded segment is a legal ZooKeeper node name (no '/', not "." or "..").
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "client/common/lock_name.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  if (turnstile::ValidateLockName(in).ok()) {
    const std::string seg = turnstile::EncodeLockName(in);
    if (seg.empty() || seg.find('/') != std::string::npos || seg == "." || seg == "..") std::abort();
    auto back = turnstile::DecodeLockName(seg);
    if (!back.ok() || *back != in) std::abort();
  }
  auto decoded = turnstile::DecodeLockName(in);
  if (decoded.ok()) {
    if (!turnstile::ValidateLockName(*decoded).ok()) std::abort();
    if (turnstile::EncodeLockName(*decoded) != in) std::abort();
  }
  return 0;
}
