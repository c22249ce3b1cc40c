#include "server/ordering.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace turnstile {
namespace {

constexpr int32_t kWrapBand = 1 << 30;

// Sort keys that undo one wrap: if the queue holds sequences from both ends
// of the int32 range it straddles the wrap, and the negative ones are newer.
std::vector<int64_t> SortKeys(const std::vector<ContenderName>& names) {
  bool high = false, low = false;
  for (const auto& n : names) {
    if (n.sequence >= kWrapBand) high = true;
    if (n.sequence < -kWrapBand) low = true;
  }
  std::vector<int64_t> keys;
  keys.reserve(names.size());
  for (const auto& n : names) {
    int64_t k = n.sequence;
    if (high && low && n.sequence < 0) k += int64_t{1} << 32;
    keys.push_back(k);
  }
  return keys;
}

}  // namespace

bool SequenceBefore(int32_t a, int32_t b) {
  // Serial-number arithmetic (RFC 1982) over 32 bits.
  return static_cast<int32_t>(static_cast<uint32_t>(a) -
                              static_cast<uint32_t>(b)) < 0;
}

std::vector<ContenderName> OrderContenders(std::vector<ContenderName> parsed) {
  std::vector<int64_t> keys = SortKeys(parsed);
  std::vector<size_t> idx(parsed.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
    if (keys[x] != keys[y]) return keys[x] < keys[y];
    // Equal sequences cannot happen under one parent; order by name so the
    // result is deterministic anyway.
    return parsed[x].node < parsed[y].node;
  });
  std::vector<ContenderName> out;
  out.reserve(parsed.size());
  for (size_t i : idx) out.push_back(std::move(parsed[i]));
  return out;
}

std::vector<ContenderName> OrderContenders(
    const std::vector<std::string>& children) {
  std::vector<ContenderName> parsed;
  parsed.reserve(children.size());
  for (const auto& child : children) {
    if (auto name = ParseContenderName(child)) parsed.push_back(*name);
  }
  return OrderContenders(std::move(parsed));
}

absl::StatusOr<OrderDecision> Decide(const std::vector<ContenderName>& queue,
                                     absl::string_view self,
                                     int holder_limit) {
  if (holder_limit < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("holder_limit must be >= 1, got ", holder_limit));
  }
  size_t pos = queue.size();
  for (size_t i = 0; i < queue.size(); ++i) {
    if (queue[i].node == self) {
      pos = i;
      break;
    }
  }
  if (pos == queue.size()) {
    return absl::NotFoundError(
        absl::StrCat("contender ", self, " is not in the queue"));
  }
  OrderDecision d;
  d.ahead = static_cast<int64_t>(pos);
  if (queue[pos].kind == ContenderKind::kShared) {
    for (size_t i = pos; i-- > 0;) {
      if (queue[i].kind == ContenderKind::kExclusive) {
        d.watch = queue[i].node;
        return d;
      }
    }
    d.holds = true;
    return d;
  }
  if (pos < static_cast<size_t>(holder_limit)) {
    d.holds = true;
    return d;
  }
  d.watch = queue[pos - static_cast<size_t>(holder_limit)].node;
  return d;
}

}  // namespace turnstile
