// Leader election and multi-lock under faults (issue 23, must-shows 2 and
// 4), against a real ZooKeeper:
// - NeverTwoLeaders: 6 candidate processes (election_child) over 2 replica
//   processes; leaders killed, replicas killed and restarted, ZooKeeper
//   restarted, for 60 s (TURNSTILE_CHAOS_SECONDS). Every leader writes its
//   term to a fenced register; the leadership intervals the candidates'
//   callbacks report never overlap, every accepted write lies in its
//   writer's interval, and no write is refused as stale.
// - MultiLocksNeverDeadlock: 8 clients each take a random 2-4 of 6 locks
//   all-or-nothing for 60 s: every attempt ends within its deadline, no
//   lock has two holders, and after a failed attempt none of its locks is
//   held by that client.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "client/lib/client.h"
#include "client/lib/coordination.h"
#include "tests/two_replicas.h"

namespace turnstile::testing {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int Seconds(const char* env, int dflt) {
  const char* v = std::getenv(env);
  int s = 0;
  return v != nullptr && absl::SimpleAtoi(v, &s) && s > 0 ? s : dflt;
}

// One candidate process and the lines it printed (a reader thread each).
struct Candidate {
  int id = 0;
  std::unique_ptr<ChildProcess> process;
  std::thread reader;
  int64_t killed_ns = 0;  // when it was killed (0: not)
};

struct Line {
  int candidate;
  std::string text;
};

TEST(ElectionChaos, NeverTwoLeaders) {
  const int seconds = Seconds("TURNSTILE_CHAOS_SECONDS", 60);
  auto zk = ZkServer::Start();
  ASSERT_TRUE(zk.ok()) << zk.status();
  const std::string connect = (*zk)->ConnectString();
  const std::string root = UniqueRoot("chaos");
  const std::vector<std::string> replica_flags = {"--zk", connect, "--zk-root", root,
                                                  "--zk-session-timeout", "4s",
                                                  "--metrics-listen", "127.0.0.1:0"};
  std::vector<std::optional<ReplicaProcess>> replicas(2);
  std::vector<std::string> addresses(2);
  for (int i = 0; i < 2; ++i) {
    replicas[i] = SpawnReplicaProcess(replica_flags);
    ASSERT_TRUE(replicas[i]);
    addresses[i] = replicas[i]->address;
  }
  const std::string target = "ipv4:" + addresses[0] + "," + addresses[1];
  char tmpl[] = "/tmp/turnstile-chaos-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string reg = dir + "/register";

  std::mutex mu;
  std::vector<Line> lines;  // GUARDED_BY(mu)
  std::vector<std::unique_ptr<Candidate>> candidates;
  int next_id = 0;
  auto spawn = [&] {
    auto c = std::make_unique<Candidate>();
    c->id = next_id++;
    c->process = ChildProcess::Spawn({TestBinary("election_child"), target, "chaos", reg});
    EXPECT_TRUE(c->process);
    Candidate* raw = c.get();
    c->reader = std::thread([&, raw] {
      for (;;) {
        auto line = raw->process->ReadLine(milliseconds(600000));
        if (!line) return;
        std::lock_guard<std::mutex> l(mu);
        lines.push_back(Line{raw->id, *line});
      }
    });
    candidates.push_back(std::move(c));
  };
  for (int i = 0; i < 6; ++i) spawn();
  // The candidate that leads now, as the lines say (-1: none).
  auto current_leader = [&]() -> Candidate* {
    std::lock_guard<std::mutex> l(mu);
    std::map<int, bool> leads;
    for (const auto& ln : lines) {
      if (ln.text.rfind("LEADER ", 0) == 0) leads[ln.candidate] = true;
      if (ln.text.rfind("NOT ", 0) == 0) leads[ln.candidate] = false;
    }
    for (auto& c : candidates) {
      if (c->killed_ns == 0 && leads[c->id]) return c.get();
    }
    return nullptr;
  };
  auto write_count = [&] {
    std::lock_guard<std::mutex> l(mu);
    return std::count_if(lines.begin(), lines.end(),
                         [](const Line& ln) { return ln.text.rfind("WRITE ", 0) == 0; });
  };
  ASSERT_TRUE(WaitFor([&] { return current_leader() != nullptr; }, milliseconds(30000)));

  int kills = 0, replica_kills = 0, zk_restarts = 0;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  int step = 0;
  while (Clock::now() < end) {
    // Between faults, a leader has written 25 times (or 15 s passed).
    const auto before = write_count();
    WaitFor([&] { return write_count() >= before + 25; }, milliseconds(15000));
    switch (step++ % 4) {
      case 0:
      case 2: {  // kill the leader's process; a fresh candidate joins
        Candidate* c = current_leader();
        if (c == nullptr) break;
        c->process->Signal(SIGKILL);
        c->killed_ns = MonoNs();
        ++kills;
        spawn();
        break;
      }
      case 1: {  // kill a replica, then bring it back on the same address
        const int i = replica_kills % 2;
        replicas[i]->process->Signal(SIGKILL);
        replicas[i]->process->Wait(milliseconds(10000));
        ++replica_kills;
        std::vector<std::string> flags = replica_flags;
        flags.insert(flags.end(), {"--listen", addresses[i]});
        replicas[i] = SpawnReplicaProcess(flags);
        ASSERT_TRUE(replicas[i]) << "replica " << i << " did not come back";
        break;
      }
      case 3: {  // restart ZooKeeper
        ASSERT_TRUE((*zk)->Stop().ok());
        ASSERT_TRUE((*zk)->Restart().ok());
        ++zk_restarts;
        break;
      }
    }
  }
  // Stop everyone; a leader at the end leads until now.
  const int64_t stop_ns = MonoNs();
  for (auto& c : candidates) {
    if (c->killed_ns == 0) {
      c->process->Signal(SIGKILL);
      c->killed_ns = MonoNs();
    }
  }
  for (auto& c : candidates) c->reader.join();

  // Leadership intervals from the callbacks.
  struct Interval {
    int candidate;
    uint64_t term;
    int64_t from, to;
  };
  std::vector<Interval> intervals;
  std::map<int, size_t> open;  // candidate -> index of its open interval
  std::vector<std::tuple<int64_t, uint64_t, int, bool>> writes;  // ns, term, candidate, ok
  std::map<int, Candidate*> by_id;
  for (auto& c : candidates) by_id[c->id] = c.get();
  for (const auto& ln : lines) {
    std::vector<std::string> f = absl::StrSplit(ln.text, ' ');
    if (f.size() < 3) continue;  // a line cut short by SIGKILL
    uint64_t term = 0;
    int64_t ns = 0;
    if (!absl::SimpleAtoi(f[1], &term) || !absl::SimpleAtoi(f[2], &ns)) continue;
    if (f[0] == "LEADER") {
      ASSERT_EQ(open.count(ln.candidate), 0u) << "LEADER twice without NOT";
      open[ln.candidate] = intervals.size();
      intervals.push_back(Interval{ln.candidate, term, ns, 0});
    } else if (f[0] == "NOT") {
      if (auto it = open.find(ln.candidate); it != open.end()) {
        intervals[it->second].to = ns;
        open.erase(it);
      }
    } else if (f[0] == "WRITE" && f.size() >= 4) {
      writes.emplace_back(ns, term, ln.candidate, f[3] == "ok");
    }
  }
  for (auto& [cand, idx] : open) intervals[idx].to = by_id[cand]->killed_ns;
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.from < b.from; });
  std::set<uint64_t> terms;
  for (size_t i = 0; i < intervals.size(); ++i) {
    terms.insert(intervals[i].term);
    ASSERT_LE(intervals[i].from, intervals[i].to);
    if (i > 0) {
      EXPECT_LE(intervals[i - 1].to, intervals[i].from)
          << "two leaders: candidate " << intervals[i - 1].candidate << " (term "
          << intervals[i - 1].term << ") until " << intervals[i - 1].to << ", candidate "
          << intervals[i].candidate << " (term " << intervals[i].term << ") from "
          << intervals[i].from;
      EXPECT_LE(intervals[i - 1].term, intervals[i].term) << "terms go back";
    }
  }
  // The fenced register: no stale term accepted or even tried, and every
  // accepted write inside its writer's leadership.
  std::sort(writes.begin(), writes.end());
  uint64_t last = 0;
  size_t accepted = 0, stale = 0;
  for (const auto& [ns, term, cand, ok] : writes) {
    if (!ok) {
      ++stale;
      continue;
    }
    ++accepted;
    EXPECT_GE(term, last) << "the register accepted a stale term";
    last = std::max(last, term);
    bool inside = false;
    for (const auto& iv : intervals) {
      inside = inside || (iv.candidate == cand && iv.term == term && iv.from <= ns && ns <= iv.to);
    }
    EXPECT_TRUE(inside) << "candidate " << cand << " wrote term " << term << " at " << ns
                        << " outside its leadership";
  }
  EXPECT_EQ(stale, 0u) << "writes with a stale term were tried";
  std::printf("never-two-leaders run: %d s, %zu leaderships, %zu terms, %zu accepted writes, "
              "%zu stale; %d leaders killed, %d replica kills, %d ZooKeeper restarts\n",
              seconds, intervals.size(), terms.size(), accepted, stale, kills, replica_kills,
              zk_restarts);
  EXPECT_GE(terms.size(), 3u) << "too few leaders to mean anything";
  EXPECT_GT(accepted, 10u);
  EXPECT_GE(kills, 1);
  for (auto& r : replicas) {
    if (r) r->process->Signal(SIGKILL);
  }
  std::string rm = "rm -rf '" + dir + "'";
  (void)std::system(rm.c_str());
}

class MultiLockTest : public TwoReplicaTest {
 protected:
  MultiLockTest() : TwoReplicaTest("multi") {}
};

TEST_F(MultiLockTest, MultiLocksNeverDeadlock) {
  const int seconds = Seconds("TURNSTILE_MULTILOCK_SECONDS", 60);
  const std::vector<std::string> names = {"acct-a", "acct-b", "acct-c",
                                          "acct-d", "acct-e", "acct-f"};
  std::map<std::string, std::atomic<int>> occupancy;
  std::map<std::string, std::atomic<uint64_t>> max_token;
  for (const auto& n : names) {
    occupancy[n] = 0;
    max_token[n] = 0;
  }
  std::atomic<int> violations{0}, overdue{0}, leftovers{0};
  std::atomic<uint64_t> successes{0}, failures{0};
  std::mutex report_mu;
  std::vector<std::string> reports;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      client::ClientOptions co;
      co.target = t % 2 == 0 ? r1_->address() : r2_->address();
      co.default_owner = "multi-" + std::to_string(t);
      auto c = client::Client::Connect(co);
      if (!c.ok()) {
        ++violations;
        return;
      }
      std::mt19937 rng(1234 + t);
      while (Clock::now() < end) {
        std::vector<std::string> pick = names;
        std::shuffle(pick.begin(), pick.end(), rng);
        pick.resize(2 + rng() % 3);
        client::AcquireOptions o;
        o.wait_timeout = milliseconds(50 + rng() % 250);
        const auto start = Clock::now();
        auto m = client::AcquireAll(c->get(), pick, o);
        const auto took = Clock::now() - start;
        // The deadline, plus the releases of what was taken meanwhile.
        if (took > o.wait_timeout + milliseconds(3000)) ++overdue;
        if (m.ok()) {
          ++successes;
          for (const auto& n : m->names()) {
            if (++occupancy[n] != 1) ++violations;
            const uint64_t tok = m->fencing_token(n);
            if (tok <= max_token[n].load()) ++violations;
            max_token[n] = std::max(max_token[n].load(), tok);
          }
          std::this_thread::sleep_for(milliseconds(rng() % 20));  // the work under the locks
          for (const auto& n : m->names()) --occupancy[n];
          if (!m->Release().ok()) ++violations;
        } else {
          ++failures;
          if (!absl::IsDeadlineExceeded(m.status()) &&
              !absl::IsFailedPrecondition(m.status())) {
            std::lock_guard<std::mutex> l(report_mu);
            reports.push_back(m.status().ToString());
          }
          // None of the attempt's locks is still held (or awaited) by us.
          for (const auto& n : pick) {
            auto d = (*c)->Describe(n);
            if (!d.ok() || !d->has_value()) continue;  // free: nobody holds it
            for (const auto& h : (*d)->holders) {
              if (h.owner == co.default_owner) ++leftovers;
            }
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& r : reports) ADD_FAILURE() << "unexpected failure: " << r;
  std::printf("multi-lock run: %d s, 8 clients, %llu successes, %llu timeouts, %d overdue\n",
              seconds, static_cast<unsigned long long>(successes.load()),
              static_cast<unsigned long long>(failures.load()), overdue.load());
  EXPECT_EQ(violations.load(), 0) << "two holders of one lock, or a token going back";
  EXPECT_EQ(overdue.load(), 0) << "an attempt outlived its deadline";
  EXPECT_EQ(leftovers.load(), 0) << "a failed attempt left a lock held";
  EXPECT_GT(successes.load(), 8u * 5) << "too little progress";
  for (const auto& n : names) {
    EXPECT_TRUE(WaitFor([&] { return zk_->Contenders(LockPath(n)).empty(); },
                        milliseconds(20000)))
        << n;
  }
}

}  // namespace
}  // namespace turnstile::testing
