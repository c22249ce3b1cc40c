// An Acquire's first message as it arrives (protobuf bytes from any client):
// decoding, conversion (AcquireParamsFromProto) and every limit check
// (LockEngine::ValidateParams) that runs before ZooKeeper is touched.
// Invariant: accepted parameters are within every documented limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <google/protobuf/stubs/logging.h>

#include "server/rpc/acquire_proto.h"
#include "server/engine/lock_engine.h"
#include "turnstile/v1/lock.pb.h"

// Invalid UTF-8 in a string field is refused by the parser, which also logs
// it: silenced, so the fuzzer's time goes to inputs, not to stderr.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  turnstile::v1::AcquireOpen open;
  if (!open.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto p = turnstile::AcquireParamsFromProto(open);
  if (!p.ok()) return 0;
  const turnstile::EngineLimits lim;
  if (!turnstile::LockEngine::ValidateParams(*p, lim).ok()) return 0;
  if (!turnstile::ValidateLockName(p->name).ok()) std::abort();
  if (p->owner.size() > lim.max_owner_bytes) std::abort();
  if (p->metadata.size() > lim.max_metadata_entries) std::abort();
  if (p->wait_timeout.count() < 0 || p->wait_timeout > lim.max_wait_timeout) std::abort();
  if (p->ttl.count() != 0 && (p->ttl < lim.min_ttl || p->ttl > lim.max_ttl)) std::abort();
  if (p->lock_delay.count() < 0 || p->lock_delay > turnstile::LockEngine::kMaxLockDelay) std::abort();
  (void)turnstile::EncodeLockName(p->name);
  return 0;
}
