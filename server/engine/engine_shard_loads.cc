// What the engine publishes for scrapes and tests: each lock's load
// (waiters, holders) and the engine's counters.
//
// A scrape must not stall grants. Counting 20,000 waiters under the
// engine's lock took milliseconds, every scrape, while every grant waited
// for it; so each lock's load is kept as its contenders change
// (every change of state or stream goes through SetState and Retally), and
// LockLoads reads under the lock only the locks that changed since the
// previous call, on the shard's loop. The copy a scrape returns is the
// caller's (LockEngine::LoadsCache).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/engine/engine_shard.h"
#include "server/engine/engine_shard_internal.h"

namespace turnstile {

using engine_internal::Clock;

namespace {
[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "turnstile engine: a count it keeps is wrong (--check-invariants): %s\n",
               what.c_str());
  std::abort();
}
}  // namespace

// Every kHeld contender is a holder (told or not yet told); a waiter counts
// only while it waits with a stream to tell.
EngineShard::Tally EngineShard::TallyOf(const Contender& c, bool gone) {
  if (gone) return Tally::kNone;
  if (c.state == State::kHeld) return Tally::kHolder;
  if (c.waiting() && c.sink) return Tally::kWaiter;
  return Tally::kNone;
}

void EngineShard::SetState(Contender* c, State s) {
  c->state = s;
  Retally(c);
}

void EngineShard::Retally(Contender* c, bool gone) {
  const Tally now = TallyOf(*c, gone);
  if (now == c->tally) return;
  auto it = locks_.find(c->segment);
  if (checks_ && (it == locks_.end() || it->second.ids.count(c->id) == 0)) {
    Die(absl::StrCat("contender ", c->id, " of lock \"", c->params.name, "\" (state ",
                     static_cast<int>(c->state), ") changed its count while its lock ",
                     it == locks_.end() ? "has no state" : "does not list it"));
  }
  if (it != locks_.end()) {
    LockState& lock = it->second;
    if (c->tally == Tally::kHolder) --lock.holders;
    if (c->tally == Tally::kWaiter) --lock.waiters;
    if (now == Tally::kHolder) ++lock.holders;
    if (now == Tally::kWaiter) ++lock.waiters;
  }
  if (c->tally == Tally::kHolder) {
    --holders_;
    c->slot->holders.erase(c->id);
  }
  if (now == Tally::kHolder) {
    ++holders_;
    c->slot->holders.insert(c->id);
  }
  c->tally = now;
  loads_changed_.insert(c->segment);
}

std::map<std::string, LockLoad> EngineShard::CountLoads() const {
  std::map<std::string, LockLoad> out;
  for (const auto& [segment, lock] : locks_) {
    LockLoad load;
    for (uint64_t id : lock.ids) {
      auto it = contenders_.find(id);
      if (it == contenders_.end()) continue;
      const Contender& c = *it->second;
      if (load.name.empty()) load.name = c.params.name;
      if (load.first_id == 0 || id < load.first_id) load.first_id = id;
      if (c.params.kind == ContenderKind::kSemaphore) {
        load.max_holders = std::max(load.max_holders, c.params.max_holders);
      }
      switch (TallyOf(c, false)) {
        case Tally::kHolder: ++load.holders; break;
        case Tally::kWaiter: ++load.waiters; break;
        case Tally::kNone: break;
      }
    }
    if (!load.name.empty()) out.emplace(segment, std::move(load));
  }
  return out;
}

void EngineShard::CheckLoads() const {
  const std::map<std::string, LockLoad> counted = CountLoads();
  size_t holders = 0;
  for (const auto& [segment, lock] : locks_) {
    auto it = counted.find(segment);
    const LockLoad none;
    const LockLoad& want = it == counted.end() ? none : it->second;
    holders += static_cast<size_t>(want.holders);
    if (lock.holders != want.holders || lock.waiters != want.waiters ||
        (it != counted.end() && (lock.name != want.name || *lock.ids.begin() != want.first_id ||
                                 lock.max_holders < want.max_holders))) {
      // Each contender of the lock as the tally saw it and as it is now.
      std::string each;
      for (uint64_t id : lock.ids) {
        auto c = contenders_.find(id);
        if (c == contenders_.end()) {
          absl::StrAppend(&each, " [", id, " not found]");
          continue;
        }
        const Contender& k = *c->second;
        absl::StrAppend(&each, " [", id, " state=", static_cast<int>(k.state),
                        " announced=", k.announced, " sink=", k.sink != nullptr,
                        " kept=", static_cast<int>(k.tally),
                        " now=", static_cast<int>(TallyOf(k, false)), "]");
      }
      Die(absl::StrCat("lock \"", lock.name, "\": kept holders=", lock.holders,
                       " waiters=", lock.waiters, ", counted holders=", want.holders,
                       " waiters=", want.waiters, " (name \"", want.name, "\");", each));
    }
  }
  if (holders != holders_) {
    Die(absl::StrCat("engine: kept holders=", holders_, ", counted ", holders));
  }
  // Each session's set of holders.
  for (const SessionSlot& slot : slots_) {
    std::set<uint64_t> holding;
    for (const auto& [id, c] : contenders_) {
      if (c->slot == &slot && c->state == State::kHeld) holding.insert(id);
    }
    if (holding != slot.holders) {
      Die(absl::StrCat("session ", slot.index, ": kept ", slot.holders.size(),
                       " holders, counted ", holding.size()));
    }
  }
}

void EngineShard::LockLoads(std::map<std::string, LockLoad>* published,
                            std::vector<LockLoad>* out) {
  // The loop reads only the locks whose load changed; the caller keeps
  // the published copy and hands out the whole.
  std::vector<std::pair<std::string, std::optional<LockLoad>>> changed;
  RunOnLoopAndWait([this, &changed] {
    OnLoop l(this);
    changed.reserve(loads_changed_.size());
    for (const std::string& segment : loads_changed_) {
      auto it = locks_.find(segment);
      if (it == locks_.end() || it->second.ids.empty()) {
        changed.emplace_back(segment, std::nullopt);
        continue;
      }
      const LockState& lock = it->second;
      LockLoad load;
      load.name = lock.name;
      load.first_id = *lock.ids.begin();
      load.holders = lock.holders;
      load.waiters = lock.waiters;
      load.max_holders = lock.max_holders;
      changed.emplace_back(segment, std::move(load));
    }
    loads_changed_.clear();
  });
  for (auto& [segment, load] : changed) {
    if (load) {
      (*published)[segment] = std::move(*load);
    } else {
      published->erase(segment);
    }
  }
  for (const auto& [segment, load] : *published) out->push_back(load);
}

EngineStats EngineShard::stats() const {
  EngineStats s;
  RunOnLoopAndWait([this, &s] {
    OnLoop l(this);
    s = Stats();
  });
  return s;
}

EngineStats EngineShard::Stats() const {
  EngineStats s = stats_;
  s.contenders = contenders_.size();
  s.holders = holders_;
  const auto now = Clock::now();
  for (const std::string& segment : delayed_locks_) {
    auto it = locks_.find(segment);
    if (it != locks_.end() && it->second.delayed_until > now) ++s.locks_in_delay;
  }
  return s;
}

}  // namespace turnstile
