// W5's ZooKeeper restart (--w5-restart-zk): run while every waiter waits,
// then the replica's reconnection checked: the same sessions own the same
// contender nodes (none expired), every watch comes back, every suspended
// holder resumes, nothing is lost.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/bench/scale_state.h"

namespace turnstile::bench {
namespace {

// The contender nodes of the locks at `lock_paths`, counted by the ZooKeeper
// session that owns them, from `dump` (every session's ephemeral nodes;
// answered by a standalone server or the leader).
bool NodesBySession(const std::string& zk_connect, const std::vector<std::string>& lock_paths,
                    std::map<std::string, int64_t>* out, std::string* error) {
  const std::string dump = FourLetterWord(zk_connect, "dump", Millis(10000), error);
  if (dump.find("Sessions with Ephemerals") == std::string::npos) {
    if (error->empty()) {
      *error = "unexpected dump reply (is `dump` in 4lw.commands.whitelist?): " +
               dump.substr(0, 200);
    }
    return false;
  }
  const std::set<std::string> locks(lock_paths.begin(), lock_paths.end());
  out->clear();
  // "0x<session>:" then one "\t<path>" line per ephemeral node it owns.
  std::string session;
  size_t pos = 0;
  while (pos < dump.size()) {
    size_t eol = dump.find('\n', pos);
    if (eol == std::string::npos) eol = dump.size();
    std::string line = dump.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("0x", 0) == 0) {
      session = line.substr(0, line.find(':'));
    } else if (line.rfind("\t/", 0) != 0) {
      session.clear();
    } else if (!session.empty()) {
      const std::string path = line.substr(1);
      if (locks.count(path.substr(0, path.rfind('/'))) > 0) ++(*out)[session];
    }
  }
  return true;
}

int64_t NodeTotal(const std::map<std::string, int64_t>& by_session) {
  int64_t n = 0;
  for (const auto& entry : by_session) n += entry.second;
  return n;
}

}  // namespace

// Runs o.w5_restart_zk (which restarts ZooKeeper) while every waiter of W5
// waits, then checks the replica's reconnection: the same ZooKeeper sessions
// own the same number of contender nodes as before (no session expired),
// zk_watch_count returns to its value before the restart (every waiter's
// watch re-established), every suspended holder is resumed, no holder is
// lost and no waiter is told anything but QUEUED. Failed checks are added to
// r's violations; false (and *why) if the run cannot go on.
bool RestartWhileWaiting(const BenchOptions& o, ScaleState* s,
                         const std::vector<std::string>& lock_paths, ScaleResult* r,
                         std::string* why) {
  ScaleRestart& x = r->restart.emplace();
  x.command = o.w5_restart_zk;
  x.watches_before = r->watch_count;
  std::map<std::string, int64_t> before, after;
  std::string error;
  if (!NodesBySession(o.zk, lock_paths, &before, &error)) {
    *why = "dump before the ZooKeeper restart: " + error;
    return false;
  }
  x.sessions_before = static_cast<int>(before.size());
  x.nodes_before = NodeTotal(before);

  Progress("restarting ZooKeeper while all wait: " + x.command);
  const Clock::time_point start = Clock::now();
  const int status = std::system(x.command.c_str());
  const Clock::time_point up = Clock::now();
  x.command_seconds = SecondsBetween(start, up);
  x.exit_status = status == -1         ? -1
                  : WIFEXITED(status)  ? WEXITSTATUS(status)
                  : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                        : -1;
  if (x.exit_status != 0) {
    *why = "the ZooKeeper restart command exited with " + std::to_string(x.exit_status) + ": " +
           x.command;
    return false;
  }

  // Every watch back: ZooKeeper counts none right after its restart, and
  // each session's SetWatches (sent as it reconnects) adds its watches back.
  // mntr may still be refused right after the command: retried until the
  // deadline.
  const Clock::time_point watch_deadline = up + kWatchesBackBudget;
  std::string mntr_error;
  for (;;) {
    Mntr m;
    if (ReadMntr(o.zk, &m, &mntr_error)) {
      if (!std::isfinite(x.zk_uptime_seconds)) {
        x.zk_uptime_seconds = MntrValue(m, "zk_uptime") / 1000.0;
        if (x.zk_uptime_seconds > SecondsBetween(start, Clock::now()) + 1) {
          *why = "ZooKeeper was not restarted by \"" + x.command + "\": it has been up " +
                 std::to_string(static_cast<int>(x.zk_uptime_seconds)) + " s";
          return false;
        }
      }
      x.watches_after = MntrValue(m, "zk_watch_count");
      if (x.watches_after >= x.watches_before) {
        const Clock::time_point back = Clock::now();
        x.watches_back_seconds = SecondsBetween(start, back);
        x.watches_back_after_up_seconds = SecondsBetween(up, back);
        break;
      }
    }
    if (Clock::now() >= watch_deadline) break;
    std::this_thread::sleep_for(Millis(20));  // the mntr polling interval
  }
  char line[240];
  if (!std::isfinite(x.watches_after)) {
    *why = "mntr after the ZooKeeper restart: " + mntr_error;
    return false;
  }
  if (!std::isfinite(x.watches_back_seconds)) {
    std::snprintf(line, sizeof(line),
                  "ZooKeeper restart: zk_watch_count %.0f %.0f s after ZooKeeper was back, "
                  "%.0f before the restart (watches not re-established)",
                  x.watches_after, kWatchesBackBudget.count() / 1000.0, x.watches_before);
    AddViolation(r, line);
  } else if (x.watches_after != x.watches_before) {
    std::snprintf(line, sizeof(line),
                  "ZooKeeper restart: zk_watch_count %.0f after the restart, %.0f before",
                  x.watches_after, x.watches_before);
    AddViolation(r, line);
  }

  // Every hold was suspended when its session lost the connection, and must
  // be resumed now that it is back.
  {
    std::unique_lock<std::mutex> l(s->mu);
    s->cv.wait_for(l, kResumeBudget, [&] {
      return (s->holders_suspended >= r->holders &&
              s->holders_resumed >= s->holders_suspended) ||
             s->holders_lost > 0 || s->failed > 0;
    });
    x.holders_suspended = s->holders_suspended;
    x.holders_resumed = s->holders_resumed;
    x.holders_lost = s->holders_lost;
    x.waiters_other_events = s->waiters_other;
    if (s->waiters_other > 0) {
      AddViolation(r, "ZooKeeper restart: " + std::to_string(s->waiters_other) +
                          " waiter event(s) other than QUEUED; the first: " +
                          s->first_waiter_other);
    }
  }
  if (x.holders_lost > 0) {
    AddViolation(r, "ZooKeeper restart: " + std::to_string(x.holders_lost) + " of " +
                        std::to_string(r->holders) + " holders got LOST");
  }
  if (x.holders_resumed < x.holders_suspended) {
    AddViolation(r, "ZooKeeper restart: " +
                        std::to_string(x.holders_suspended - x.holders_resumed) +
                        " suspended holder(s) not RESUMED " +
                        std::to_string(kResumeBudget.count() / 1000) + " s later");
  }

  if (!NodesBySession(o.zk, lock_paths, &after, &error)) {
    *why = "dump after the ZooKeeper restart: " + error;
    return false;
  }
  x.sessions_after = static_cast<int>(after.size());
  x.nodes_after = NodeTotal(after);
  x.sessions_same = before == after;
  x.checked = true;
  if (!x.sessions_same) {
    AddViolation(r, "ZooKeeper restart: W5's " + std::to_string(x.nodes_before) +
                        " contender nodes were owned by " + std::to_string(x.sessions_before) +
                        " session(s) before it, " + std::to_string(x.nodes_after) + " by " +
                        std::to_string(x.sessions_after) +
                        " after, not the same ones (a session expired)");
  }
  std::snprintf(line, sizeof(line),
                "ZooKeeper back after %.1f s; zk_watch_count %.0f (%.0f before) %.1f s after "
                "the restart began; holders SUSPENDED %d, RESUMED %d, LOST %d; draining",
                x.command_seconds, x.watches_after, x.watches_before, x.watches_back_seconds,
                x.holders_suspended, x.holders_resumed, x.holders_lost);
  Progress(line);
  return true;
}

}  // namespace turnstile::bench
