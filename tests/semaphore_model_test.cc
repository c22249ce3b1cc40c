// Issue 21, must-show 1: the N-holder semaphore's waiting rule alone, as a
// model with no ZooKeeper. One lock, contenders on 2 replicas, and every
// order (exhaustively for small cases, randomised with fixed seeds beyond)
// of joins, departures (releases and cancels, holders and waiters alike, in
// any order), ZooKeeper applying requests, and replies and watch
// notifications reaching the replicas.
//
// The contenders decide with the engine's own predicate (Decide in
// server/recipe/ordering.h, over a LockQueue view) and follow the protocol the
// predicate's comment describes:
//   - join: create (ephemeral-sequential, N in the name), then one listing;
//   - holds: write the grant mark on its own node; drop any other watch;
//   - first waiter (exactly N ahead): getData+watch on every entry ahead;
//   - other waiters: getData+watch on the predecessor only; a predecessor
//     whose data shows the grant mark makes it list the children once more;
//   - a watch that fires (deleted, or data changed) or a read that finds no
//     node makes it re-decide from its view (a changed node is read again).
//
// ZooKeeper here: one server that applies each replica's requests in the
// order sent, and answers each replica (replies and notifications) in the
// order it produced them; one-shot data watches that fire on delete and on
// data change. Each contender keeps its own view (the engine shares one per
// replica; the rule asks no more of a view than that it is the contender's
// latest listing minus the departures it learnt since).
//
// Checked in every state: never more than N holders; every holder among
// the first N nodes (FIFO: nobody holds out of turn); no contender lists
// the children more than twice. In every state with nothing in flight:
// exactly min(N, live contenders) hold. Over a whole run: every watch
// notification is counted, and there are at most 2 per departure (a
// departure wakes at most two contenders: the first waiter, and the one its
// grant mark wakes), apart from the grant marks of contenders that hold
// when they join (at most one notification each). No children watch exists
// in this protocol at all.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "server/recipe/lock_name.h"
#include "server/recipe/lock_queue.h"
#include "server/recipe/ordering.h"

namespace turnstile {
namespace {

struct Request {
  enum Type { kCreate, kList, kGetData, kMark, kDelete, kRemoveWatches } type;
  int agent = 0;
  int32_t seq = 0;             // kGetData, kMark, kDelete: the node
  std::vector<int32_t> nodes;  // kRemoveWatches
};

struct Reply {
  enum Type { kCreated, kListing, kData, kDeleted, kChanged } type;
  int agent = 0;
  int32_t seq = 0;        // kCreated: the new node; kData/kDeleted/kChanged: the node
  bool exists = false;    // kData
  bool granted = false;   // kData: the grant mark is on the node
  std::vector<std::string> children;  // kListing
};

struct Agent {
  enum State { kUnjoined, kJoining, kWaiting, kHolding, kGone } state = kUnjoined;
  int replica = 0;
  int32_t seq = -1;  // -1 until the create's reply
  LockQueue view;
  bool listed = false;          // the join listing came back
  bool listing_pending = false;
  bool first_waiter = false;    // its latest decision
  std::set<int32_t> watching;   // nodes it asked to watch (or read)
  int listings = 0;
  bool held_at_join = false;
};

struct ZkNode {
  int agent;
  bool granted = false;
};

class Model {
 public:
  Model(int n, int contenders) : n_(n), agents_(static_cast<size_t>(contenders)) {
    for (int i = 0; i < contenders; ++i) agents_[static_cast<size_t>(i)].replica = i % 2;
  }

  // The moves possible in this state, as numbers for Step.
  //   0: the next contender joins
  //   1 + r: ZooKeeper applies replica r's next request (r = 0, 1)
  //   3 + r: replica r takes its next reply or notification
  //   5 + i: contender i departs (release or cancel)
  std::vector<int> Moves() const {
    std::vector<int> out;
    if (next_join_ < static_cast<int>(agents_.size())) out.push_back(0);
    for (int r = 0; r < 2; ++r) {
      if (!to_zk_[r].empty()) out.push_back(1 + r);
      if (!from_zk_[r].empty()) out.push_back(3 + r);
    }
    for (size_t i = 0; i < agents_.size(); ++i) {
      const Agent& a = agents_[i];
      if (a.seq >= 0 && a.state != Agent::kGone) out.push_back(5 + static_cast<int>(i));
    }
    return out;
  }

  // Applies a move; returns "" or the first violated property.
  std::string Step(int move) {
    if (move == 0) {
      Join(next_join_++);
    } else if (move <= 2) {
      ZkApply(move - 1);
    } else if (move <= 4) {
      Receive(move - 3);
    } else {
      Depart(move - 5);
    }
    return Check();
  }

  bool Done() const {
    if (next_join_ < static_cast<int>(agents_.size())) return false;
    for (const Agent& a : agents_) {
      if (a.state != Agent::kGone) return false;
    }
    return Quiet();
  }

  bool Quiet() const {
    return to_zk_[0].empty() && to_zk_[1].empty() && from_zk_[0].empty() && from_zk_[1].empty();
  }

  // Whole-run bound on notifications (see the file comment).
  std::string CheckTotals() const {
    int at_join = 0;
    for (const Agent& a : agents_) at_join += a.held_at_join ? 1 : 0;
    if (notifications_ > 2 * departures_ + at_join) {
      return "notifications " + std::to_string(notifications_) + " > 2 x " +
             std::to_string(departures_) + " departures + " + std::to_string(at_join) +
             " grants at join";
    }
    return "";
  }

  int notifications() const { return notifications_; }
  // The contender whose node has sequence `seq` (-1 if none).
  int AgentWithSeq(int32_t seq) const {
    for (size_t i = 0; i < agents_.size(); ++i) {
      if (agents_[i].seq == seq) return static_cast<int>(i);
    }
    return -1;
  }
  bool Holding(int agent) const {
    return agents_[static_cast<size_t>(agent)].state == Agent::kHolding;
  }
  int departures() const { return departures_; }
  int max_listings() const {
    int m = 0;
    for (const Agent& a : agents_) m = std::max(m, a.listings);
    return m;
  }

  // A canonical text of the whole state (for the exhaustive search's set of
  // visited states).
  std::string Key() const {
    std::string k = std::to_string(next_join_) + "|" + std::to_string(next_seq_) + "|" +
                    std::to_string(notifications_) + "|" + std::to_string(departures_) + "|";
    for (const auto& [seq, node] : nodes_) {
      k += std::to_string(seq) + ":" + std::to_string(node.agent) + (node.granted ? "g" : "") + ",";
    }
    k += "|";
    for (const auto& [seq, agent] : watches_) k += std::to_string(seq) + ">" + std::to_string(agent) + ",";
    for (const Agent& a : agents_) {
      k += "|" + std::to_string(a.state) + "/" + std::to_string(a.seq) + "/" +
           (a.listed ? "l" : "") + (a.listing_pending ? "p" : "") + (a.first_waiter ? "f" : "") +
           (a.held_at_join ? "j" : "") + std::to_string(a.listings) + "/";
      for (int32_t w : a.watching) k += std::to_string(w) + ",";
      k += "/";
      a.view.ForFront(a.view.size(), [&](int64_t, int32_t seq, const LockQueue::Entry&) {
        k += std::to_string(seq) + ",";
      });
    }
    for (int r = 0; r < 2; ++r) {
      k += "|";
      for (const Request& q : to_zk_[r]) {
        k += std::to_string(q.type) + "." + std::to_string(q.agent) + "." + std::to_string(q.seq);
        for (int32_t s : q.nodes) k += "." + std::to_string(s);
        k += ";";
      }
      k += "|";
      for (const Reply& p : from_zk_[r]) {
        k += std::to_string(p.type) + "." + std::to_string(p.agent) + "." + std::to_string(p.seq) +
             (p.exists ? "e" : "") + (p.granted ? "g" : "");
        for (const std::string& c : p.children) k += "." + c.substr(c.size() - 3);
        k += ";";
      }
    }
    return k;
  }

 private:
  std::string NodeName(int agent, int32_t seq) const {
    char uid[17];
    std::snprintf(uid, sizeof(uid), "%016x", agent + 1);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s%010d",
                  ContenderNodePrefix(ContenderKind::kSemaphore, uid, n_).c_str(), seq);
    return buf;
  }

  void Send(int agent, Request q) {
    q.agent = agent;
    to_zk_[agents_[static_cast<size_t>(agent)].replica].push_back(std::move(q));
  }

  void Join(int i) {
    Agent& a = agents_[static_cast<size_t>(i)];
    a.state = Agent::kJoining;
    // The create and its listing are pipelined (one listing behind it).
    Send(i, Request{Request::kCreate});
    Send(i, Request{Request::kList});
    a.listing_pending = true;
    ++a.listings;
  }

  void Depart(int i) {
    Agent& a = agents_[static_cast<size_t>(i)];
    a.state = Agent::kGone;  // a holder stops counting on its hold at once
    ++departures_;
    if (!a.watching.empty()) {
      Send(i, Request{Request::kRemoveWatches, 0, 0, {a.watching.begin(), a.watching.end()}});
      a.watching.clear();
    }
    Send(i, Request{Request::kDelete, 0, a.seq});
  }

  // ZooKeeper applies replica r's next request.
  void ZkApply(int r) {
    Request q = to_zk_[r].front();
    to_zk_[r].pop_front();
    auto reply = [&](Reply p) {
      p.agent = q.agent;
      from_zk_[r].push_back(std::move(p));
    };
    switch (q.type) {
      case Request::kCreate: {
        const int32_t seq = next_seq_++;
        nodes_[seq] = ZkNode{q.agent};
        reply(Reply{Reply::kCreated, 0, seq});
        break;
      }
      case Request::kList: {
        Reply p{Reply::kListing};
        for (const auto& [seq, node] : nodes_) p.children.push_back(NodeName(node.agent, seq));
        reply(std::move(p));
        break;
      }
      case Request::kGetData: {
        auto it = nodes_.find(q.seq);
        Reply p{Reply::kData, 0, q.seq};
        if (it != nodes_.end()) {
          p.exists = true;
          p.granted = it->second.granted;
          watches_.insert({q.seq, q.agent});
        }
        reply(p);
        break;
      }
      case Request::kMark: {
        auto it = nodes_.find(q.seq);
        if (it == nodes_.end()) break;
        it->second.granted = true;
        Fire(q.seq, Reply::kChanged);
        break;
      }
      case Request::kDelete:
        nodes_.erase(q.seq);
        Fire(q.seq, Reply::kDeleted);
        break;
      case Request::kRemoveWatches:
        for (int32_t seq : q.nodes) {
          auto range = watches_.equal_range(seq);
          for (auto it = range.first; it != range.second;) {
            it = it->second == q.agent ? watches_.erase(it) : std::next(it);
          }
        }
        break;
    }
  }

  // Every watch on `seq` fires once and is gone.
  void Fire(int32_t seq, Reply::Type type) {
    auto range = watches_.equal_range(seq);
    for (auto it = range.first; it != range.second; ++it) {
      const int agent = it->second;
      from_zk_[agents_[static_cast<size_t>(agent)].replica].push_back(Reply{type, agent, seq});
      ++notifications_;
    }
    watches_.erase(range.first, range.second);
  }

  // Replica r handles its next reply or notification.
  void Receive(int r) {
    Reply p = from_zk_[r].front();
    from_zk_[r].pop_front();
    Agent& a = agents_[static_cast<size_t>(p.agent)];
    if (p.type == Reply::kCreated) {
      a.seq = p.seq;
      return;
    }
    if (p.type == Reply::kDeleted || p.type == Reply::kChanged || (p.type == Reply::kData && !p.exists)) {
      a.watching.erase(p.seq);
    }
    if (a.state == Agent::kGone || a.state == Agent::kHolding) return;
    switch (p.type) {
      case Reply::kListing: {
        a.listing_pending = false;
        a.listed = true;
        a.view.ReplaceWith(p.children, [](const std::string&) { return uint64_t{0}; },
                           [](const LockQueue::Entry&) { return false; });
        Decide(p.agent, /*at_join=*/a.state == Agent::kJoining);
        break;
      }
      case Reply::kData:
        if (!p.exists) {
          Forget(a, p.seq);
          Decide(p.agent, false);
        } else if (p.granted && !a.first_waiter && !a.listing_pending && IsPredecessor(a, p.seq)) {
          // The predecessor holds: this one is now the first waiter. One
          // more listing (its second), then an exact decision.
          Send(p.agent, Request{Request::kList});
          a.listing_pending = true;
          ++a.listings;
        }
        break;
      case Reply::kDeleted:
        Forget(a, p.seq);
        Decide(p.agent, false);
        break;
      case Reply::kChanged:
        // Data changed (the grant mark): read it again, watching again.
        if (a.state == Agent::kWaiting && !a.listing_pending) {
          a.watching.insert(p.seq);
          Send(p.agent, Request{Request::kGetData, 0, p.seq});
        }
        break;
      case Reply::kCreated:
        break;
    }
  }

  static bool IsPredecessor(const Agent& a, int32_t seq) {
    const LockQueue::Entry* ahead = a.view.Ahead(a.seq);
    return ahead != nullptr && ParseContenderName(ahead->node)->sequence == seq;
  }

  static void Forget(Agent& a, int32_t seq) {
    const LockQueue::Entry* e = a.view.Find(seq);
    if (e != nullptr) a.view.Erase(seq, std::string(e->node));
  }

  // The rule, and what the contender does about it.
  void Decide(int i, bool at_join) {
    Agent& a = agents_[static_cast<size_t>(i)];
    if (!a.listed || a.listing_pending || a.seq < 0) return;  // its next listing decides
    const OrderDecision d = turnstile::Decide(a.view, a.seq, ContenderKind::kSemaphore, n_);
    if (d.holds) {
      a.state = Agent::kHolding;
      a.held_at_join = at_join;
      a.first_waiter = false;
      if (!a.watching.empty()) {
        Send(i, Request{Request::kRemoveWatches, 0, 0, {a.watching.begin(), a.watching.end()}});
        a.watching.clear();
      }
      Send(i, Request{Request::kMark, 0, a.seq});
      return;
    }
    a.state = Agent::kWaiting;
    a.first_waiter = d.first_waiter;
    for (const LockQueue::Entry* b : d.blockers) {
      const int32_t seq = ParseContenderName(b->node)->sequence;
      if (a.watching.insert(seq).second) Send(i, Request{Request::kGetData, 0, seq});
    }
  }

  std::string Check() const {
    int holders = 0, live = 0;
    for (size_t i = 0; i < agents_.size(); ++i) {
      const Agent& a = agents_[i];
      if (a.state == Agent::kHolding) ++holders;
      if (a.listings > 2) return "contender " + std::to_string(i) + " listed 3 times";
    }
    if (holders > n_) return std::to_string(holders) + " holders > N = " + std::to_string(n_);
    // FIFO: a holder is always among the first N nodes that exist (nobody
    // holds out of turn).
    int rank = 0;
    std::set<int32_t> front;
    for (const auto& [seq, node] : nodes_) {
      if (rank++ < n_) front.insert(seq);
    }
    for (size_t i = 0; i < agents_.size(); ++i) {
      const Agent& a = agents_[i];
      if (a.state == Agent::kHolding && front.count(a.seq) == 0) {
        return "contender " + std::to_string(i) + " holds out of turn";
      }
    }
    if (Quiet()) {
      for (const Agent& a : agents_) {
        if (a.state != Agent::kGone && a.state != Agent::kUnjoined) ++live;
      }
      if (holders != std::min(n_, live)) {
        return "nothing in flight, " + std::to_string(live) + " contenders, but " +
               std::to_string(holders) + " hold (N = " + std::to_string(n_) + ")";
      }
    }
    return "";
  }

  int n_;
  std::vector<Agent> agents_;
  int next_join_ = 0;
  int32_t next_seq_ = 0;
  std::map<int32_t, ZkNode> nodes_;
  std::multimap<int32_t, int> watches_;  // node -> watching contender
  std::deque<Request> to_zk_[2];
  std::deque<Reply> from_zk_[2];
  int notifications_ = 0;
  int departures_ = 0;
};

// Every reachable state of Model(n, contenders), each visited once.
struct Exhaustive {
  std::unordered_set<std::string> seen;
  std::string failure;
  uint64_t terminals = 0;
  int max_notifications_per_departure_x100 = 0;

  void Run(const Model& m, std::vector<int>* path) {
    if (!failure.empty()) return;
    if (!seen.insert(m.Key()).second) return;
    if (m.Done()) {
      ++terminals;
      const std::string t = m.CheckTotals();
      if (!t.empty()) failure = t + Trace(*path);
      return;
    }
    for (int move : m.Moves()) {
      Model next = m;
      path->push_back(move);
      const std::string v = next.Step(move);
      if (!v.empty()) {
        failure = v + Trace(*path);
      } else {
        Run(next, path);
      }
      path->pop_back();
      if (!failure.empty()) return;
    }
  }

  static std::string Trace(const std::vector<int>& path) {
    std::string s = " (moves:";
    for (int m : path) s += " " + std::to_string(m);
    return s + ")";
  }
};

TEST(SemaphoreModel, ExhaustiveForSmallCases) {
  struct Case {
    int n, contenders;
  };
  for (const Case c : {Case{1, 2}, Case{1, 3}, Case{2, 3}, Case{3, 3}}) {
    Exhaustive x;
    std::vector<int> path;
    x.Run(Model(c.n, c.contenders), &path);
    EXPECT_EQ(x.failure, "") << "N = " << c.n << ", " << c.contenders << " contenders";
    EXPECT_GT(x.terminals, 0u);
    std::printf("N = %d, %d contenders on 2 replicas: %zu states, %llu end states, every one checked\n",
                c.n, c.contenders, x.seen.size(), static_cast<unsigned long long>(x.terminals));
  }
}

// N in 1..4, up to 8 contenders: random orders of everything (fixed seeds,
// so a failure repeats), each run to its end.
TEST(SemaphoreModel, RandomisedUpToEightContenders) {
  int runs = 0, steps = 0, max_listings = 0;
  double worst_ratio = 0;
  for (int n = 1; n <= 4; ++n) {
    for (int contenders = n; contenders <= 8; ++contenders) {
      for (uint32_t seed = 1; seed <= 400; ++seed) {
        std::mt19937 rng(seed * 7919 + static_cast<uint32_t>(n * 100 + contenders));
        Model m(n, contenders);
        std::vector<int> path;
        for (int step = 0; !m.Done(); ++step) {
          ASSERT_LT(step, 100000) << "no end";
          std::vector<int> moves = m.Moves();
          ASSERT_FALSE(moves.empty()) << "stuck: N = " << n << ", seed " << seed;
          // Departures are rarer than the rest, so that queues build up.
          int move = moves[rng() % moves.size()];
          if (move >= 5 && rng() % 4 != 0) {
            std::vector<int> others;
            for (int mv : moves) {
              if (mv < 5) others.push_back(mv);
            }
            if (!others.empty()) move = others[rng() % others.size()];
          }
          path.push_back(move);
          const std::string v = m.Step(move);
          ASSERT_EQ(v, "") << "N = " << n << ", " << contenders << " contenders, seed " << seed
                           << Exhaustive::Trace(path);
          ++steps;
        }
        ASSERT_EQ(m.CheckTotals(), "") << "N = " << n << ", seed " << seed;
        max_listings = std::max(max_listings, m.max_listings());
        if (m.departures() > 0) {
          worst_ratio = std::max(worst_ratio, static_cast<double>(m.notifications()) / m.departures());
        }
        ++runs;
      }
    }
  }
  EXPECT_LE(max_listings, 2);
  std::printf("%d random runs, %d steps: at most %d listings per contender, at most %.2f "
              "notifications per departure in a run\n",
              runs, steps, max_listings, worst_ratio);
}

// The non-work-conserving rule the issue replaced, for contrast: with N = 3
// and [A B C | D E] where D watches only A (the node N places ahead), B's
// departure frees a permit nobody takes. Under this rule D (the first
// waiter) is blocked by A, B and C, so B's departure wakes D, which holds.
TEST(SemaphoreModel, AnOutOfOrderDepartureWakesTheFirstWaiter) {
  Model m(3, 5);
  // Join all five and deliver everything (replica by replica), then let B go.
  for (int i = 0; i < 5; ++i) ASSERT_EQ(m.Step(0), "");
  auto drain = [&] {
    for (bool more = true; more;) {
      more = false;
      for (int move : m.Moves()) {
        if (move >= 1 && move <= 4) {
          ASSERT_EQ(m.Step(move), "");
          more = true;
          break;
        }
      }
    }
  };
  drain();
  ASSERT_TRUE(m.Quiet());
  const int b = m.AgentWithSeq(1), d = m.AgentWithSeq(3);
  ASSERT_TRUE(b >= 0 && d >= 0 && m.Holding(b) && !m.Holding(d));
  ASSERT_EQ(m.Step(5 + b), "");  // B, a holder in the middle, departs
  drain();  // the quiet-state check demands min(3, 4) = 3 holders
  EXPECT_TRUE(m.Quiet());
  EXPECT_TRUE(m.Holding(d));
  EXPECT_LE(m.notifications(), 2);
}

}  // namespace
}  // namespace turnstile
