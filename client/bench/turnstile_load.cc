// The turnstile side of the bench: Acquire streams over plain gRPC stubs
// (completion-queue API, one polling thread), many at once, with every event
// timestamped on one monotonic clock in this process.
#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "client/bench/acquire_call.h"
#include "client/lib/tls.h"

namespace turnstile::bench {
namespace {

constexpr Millis kConnectTimeout(10000);

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN_CODE";
  }
}

}  // namespace

const std::shared_ptr<client::EventLoop>& BenchLoop() {
  static const auto* loop = new std::shared_ptr<client::EventLoop>(client::SharedEventLoop());
  return *loop;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, int index) {
  return MakeChannel(Endpoint{target, nullptr, ""}, index);
}

std::shared_ptr<grpc::Channel> MakeChannel(const Endpoint& endpoint, int index) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("turnstile.bench.channel", index);
  if (!endpoint.server_name.empty()) {
    args.SetSslTargetNameOverride(endpoint.server_name);
  }
  return grpc::CreateCustomChannel(
      endpoint.address,
      endpoint.creds != nullptr ? endpoint.creds : grpc::InsecureChannelCredentials(), args);
}

bool SecureEndpoint(const SecureServer& s, Endpoint* out, std::string* error) {
  auto creds = client::MakeChannelCredentials({s.ca_file, s.cert_file, s.key_file});
  if (!creds.ok()) {
    *error = "--secure-server " + s.label + ": " + std::string(creds.status().message());
    return false;
  }
  *out = Endpoint{s.address, *creds, s.server_name};
  return true;
}

bool ConnectAll(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                const std::string& target, std::string* error) {
  const auto deadline = ToSystem(Clock::now() + kConnectTimeout);
  for (const auto& ch : channels) {
    if (!ch->WaitForConnected(deadline)) {
      *error = "cannot connect to turnstiled at " + target + " within " +
               std::to_string(kConnectTimeout.count() / 1000) + " s";
      return false;
    }
  }
  return true;
}

void CallTracker::Reap() {
  std::vector<AcquireCall*> done;
  {
    std::lock_guard<std::mutex> l(mu_);
    done.swap(finished_);
  }
  for (AcquireCall* c : done) delete c;
}

void CallTracker::CancelAll() {
  std::vector<AcquireCall*> live;
  {
    std::lock_guard<std::mutex> l(mu_);
    live.assign(live_.begin(), live_.end());
  }
  for (AcquireCall* c : live) c->Cancel();
}

std::string DescribeFailure(const std::string& lock, const AcquireCall& c,
                            const grpc::Status& s) {
  std::string what = "Acquire \"" + lock + "\": ";
  if (!s.ok()) {
    what += std::string(CodeName(s.error_code())) + ": " + s.error_message();
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      what += " (raise turnstiled's --max-contenders-per-lock / --max-streams / "
              "--max-watch-bytes)";
    }
  } else if (c.lost) {
    what += "LOST while held";
  } else {
    what += "stream ended without ACQUIRED and RELEASED";
  }
  return what;
}

// --- W1, W2, W3: acquire+release loops ----------------------------------------

// The channels of a TurnstileCycles, shared with each slice's state (which
// a stuck slice leaks, calls and all: they must keep their stubs).
struct TurnstileCycles::Conns {
  std::string target;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::LockService::Stub>> stubs;
  std::vector<std::string> names;
};

namespace {

// One slice.
struct CycleState {
  std::shared_ptr<const TurnstileCycles::Conns> conns;
  Clock::time_point start{}, end{}, rpc_deadline{};
  Millis wait_timeout{30000};

  std::mutex mu;
  bool stop = false;
  uint64_t cycles = 0;
  std::vector<double> cycle_ms;
  struct Grant {
    uint64_t token;
    Clock::time_point acquired_at, released_at, release_sent_at;
    bool queued, released;
  };
  std::vector<Grant> grants;
  uint64_t errors = 0;
  std::string first_error;

  CallTracker tracker;  // last: destroyed (reaping calls) first
};

void StartCycle(CycleState* s, int client);

void OnCycleDone(CycleState* s, AcquireCall* c, const grpc::Status& st,
                 Clock::time_point t) {
  bool again = false;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (c->acquired) {
      s->grants.push_back({c->token, c->acquired_at, c->released_at,
                           c->release_requested_at, c->queued_events > 0, c->released});
    }
    if (st.ok() && c->acquired && c->released) {
      if (c->released_at <= s->end) {
        ++s->cycles;
        s->cycle_ms.push_back(ToMs(t - c->started));
      }
      again = !s->stop && t < s->end;
    } else {
      ++s->errors;
      if (s->first_error.empty()) {
        s->first_error = DescribeFailure(s->conns->names[c->client], *c, st);
      }
    }
  }
  if (again) StartCycle(s, c->client);
}

void StartCycle(CycleState* s, int client) {
  auto* call = new AcquireCall(
      &s->tracker,
      [](AcquireCall* c, const AcquireEvent& e, Clock::time_point) {
        if (e.type() == AcquireEvent::ACQUIRED) c->Release();  // hold time 0
      },
      [s](AcquireCall* c, const grpc::Status& st, Clock::time_point t) {
        OnCycleDone(s, c, st, t);
      });
  call->client = client;
  AcquireOpen open;
  open.set_name(s->conns->names[client]);
  open.set_owner("turnstile-bench");
  open.mutable_wait_timeout()->set_seconds(s->wait_timeout.count() / 1000);
  call->Start(s->conns->stubs[client].get(), open, s->rpc_deadline, false);
}

}  // namespace

bool CheckServer(const BenchOptions& o, Millis timeout, std::string* error) {
  auto ch = MakeChannel(o.server, -1);
  if (!ch->WaitForConnected(ToSystem(Clock::now() + timeout))) {
    *error = "cannot connect to turnstiled at " + o.server;
    return false;
  }
  return true;
}

TurnstileCycles::TurnstileCycles(const BenchOptions& o, std::vector<std::string> lock_names)
    : TurnstileCycles(Endpoint{o.server, nullptr, ""}, std::move(lock_names)) {}

TurnstileCycles::TurnstileCycles(const Endpoint& endpoint, std::vector<std::string> lock_names)
    : conns_(std::make_shared<Conns>()) {
  conns_->target = endpoint.address;
  conns_->names = std::move(lock_names);
  for (size_t i = 0; i < conns_->names.size(); ++i) {
    conns_->channels.push_back(MakeChannel(endpoint, static_cast<int>(i)));
    conns_->stubs.push_back(v1::LockService::NewStub(conns_->channels.back()));
  }
}

TurnstileCycles::~TurnstileCycles() = default;

bool TurnstileCycles::Connect(std::string* error) {
  return ConnectAll(conns_->channels, conns_->target, error);
}

CycleSamples TurnstileCycles::Run(Millis duration) {
  CycleSamples r;
  r.slices = 1;
  if (broken_) {
    r.errors = 1;
    r.error = "not run: an earlier slice's Acquire streams did not end";
    return r;
  }
  auto s = std::make_unique<CycleState>();
  s->conns = conns_;
  const std::vector<std::string>& names = conns_->names;
  const int clients = static_cast<int>(names.size());
  const bool one_lock = std::all_of(names.begin(), names.end(),
                                    [&](const std::string& n) { return n == names[0]; });

  s->start = Clock::now();
  s->end = s->start + duration;
  s->rpc_deadline = s->end + Millis(60000);
  for (int i = 0; i < clients; ++i) StartCycle(s.get(), i);

  bool idle = s->tracker.WaitIdle(s->end + Millis(30000));
  if (!idle) {
    {
      std::lock_guard<std::mutex> l(s->mu);
      s->stop = true;
    }
    s->tracker.CancelAll();
    idle = s->tracker.WaitIdle(Clock::now() + Millis(10000));
  }

  std::unique_lock<std::mutex> l(s->mu);
  r.seconds = std::chrono::duration<double>(s->end - s->start).count();
  r.cycles = s->cycles;
  r.cycle_ms = std::move(s->cycle_ms);
  r.errors = s->errors;
  r.error = s->first_error;
  if (!idle) {
    r.errors++;
    if (r.error.empty()) r.error = "Acquire streams did not end after cancellation";
  }
  if (one_lock) {
    // Grant order is fencing-token order (FIFO by node creation). A grant
    // to a contender that had been QUEUED is a handoff from the previous
    // one. Only this slice's grants are paired: every stream of the
    // previous slice had ended before this one started, so its last grant
    // is no predecessor of this slice's first.
    std::sort(s->grants.begin(), s->grants.end(),
              [](const CycleState::Grant& a, const CycleState::Grant& b) {
                return a.token < b.token;
              });
    for (size_t i = 1; i < s->grants.size(); ++i) {
      const auto& prev = s->grants[i - 1];
      const auto& cur = s->grants[i];
      if (!cur.queued || !prev.released || cur.acquired_at > s->end) continue;
      double ms = ToMs(cur.acquired_at - prev.released_at);
      r.handoff_signed_ms.push_back(ms);
      if (ms < 0) ++r.acquired_before_released;
      r.handoff_ms.push_back(ms < 0 ? 0 : ms);
      r.release_to_acquired_ms.push_back(ToMs(cur.acquired_at - prev.release_sent_at));
    }
  }
  l.unlock();
  if (!idle) {
    broken_ = true;
    s.release();  // calls may still reference it: leak, don't crash
  }
  return r;
}

// --- W4: a herd queued behind one holder, then drained -------------------------

namespace {

struct HerdState {
  std::vector<std::shared_ptr<grpc::Channel>> channels;  // [0] is the holder's
  std::vector<std::unique_ptr<v1::LockService::Stub>> stubs;
  std::string name;

  std::mutex mu;
  std::condition_variable cv;
  bool holder_acquired = false;
  bool holder_done = false;
  int queued = 0;  // waiters that got their first QUEUED
  int ended = 0;   // waiters whose stream ended
  int failed = 0;
  std::string first_error;
  bool draining = false;
  uint64_t drain_queued_events = 0;
  std::vector<Grant> recs;

  CallTracker tracker;
};

void RecordDone(HerdState* s, AcquireCall* c, const grpc::Status& st, bool holder) {
  std::lock_guard<std::mutex> l(s->mu);
  if (holder) {
    s->holder_done = true;
  } else {
    ++s->ended;
  }
  if (st.ok() && c->acquired && c->released) {
    s->recs.push_back({c->token, c->acquired_at, c->released_at, c->release_requested_at});
  } else {
    ++s->failed;
    if (s->first_error.empty()) s->first_error = DescribeFailure(s->name, *c, st);
  }
  s->cv.notify_all();
}

}  // namespace

HerdResult RunTurnstileHerd(const BenchOptions& o, const std::string& lock_name, int n) {
  HerdResult r;
  r.n = n;
  auto s = std::make_unique<HerdState>();
  s->name = lock_name;
  const int channels = std::max(1, std::min(o.w4_channels, n));
  for (int i = 0; i <= channels; ++i) {
    s->channels.push_back(MakeChannel(o.server, 1000 + i));
    s->stubs.push_back(v1::LockService::NewStub(s->channels.back()));
  }
  if (!ConnectAll(s->channels, o.server, &r.error)) return r;

  // Generous bounds that still end a stuck run by themselves. The drain is
  // given 60 s + 150 ms per waiter: a replica that updates every local
  // waiter's position on each handoff does O(N) work per handoff.
  const Millis queue_budget = Millis(30000) + Millis(30) * n;
  const Millis drain_budget = Millis(60000) + Millis(150) * n;
  // (At most 1 h: the replica's default --max-wait-timeout.)
  const Millis wait_timeout =
      std::min<Millis>(queue_budget + drain_budget + Millis(10000), Millis(3600 * 1000));
  const Clock::time_point rpc_deadline = Clock::now() + wait_timeout + Millis(30000);
  AcquireOpen open;
  open.set_name(lock_name);
  open.set_owner("turnstile-bench");
  open.mutable_wait_timeout()->set_seconds(wait_timeout.count() / 1000);

  auto* holder = new AcquireCall(
      &s->tracker,
      [st = s.get()](AcquireCall*, const AcquireEvent& e, Clock::time_point) {
        if (e.type() == AcquireEvent::ACQUIRED) {
          std::lock_guard<std::mutex> l(st->mu);
          st->holder_acquired = true;
          st->cv.notify_all();
        }
      },
      [st = s.get()](AcquireCall* c, const grpc::Status& status, Clock::time_point) {
        RecordDone(st, c, status, true);
      });
  holder->Start(s->stubs[0].get(), open, rpc_deadline, /*hold=*/true);
  bool holder_released = false;
  auto release_holder = [&] {
    if (!holder_released) {
      holder_released = true;
      holder->Release();
    }
  };

  // Ends the run early: releases the holder, cancels everything still open.
  auto abort_run = [&](const std::string& why) {
    {
      std::lock_guard<std::mutex> l(s->mu);
      r.error = s->first_error.empty() ? why : why + ": " + s->first_error;
    }
    release_holder();
    s->tracker.CancelAll();
    if (!s->tracker.WaitIdle(Clock::now() + Millis(15000))) {
      r.error += " (streams did not end after cancellation)";
      s.release();  // leak rather than free what callbacks may still use
    }
    return r;
  };

  {
    std::unique_lock<std::mutex> l(s->mu);
    if (!s->cv.wait_for(l, Millis(15000), [&] { return s->holder_acquired || s->holder_done; }) ||
        !s->holder_acquired) {
      l.unlock();
      return abort_run("the holder was not granted");
    }
  }

  for (int i = 0; i < n; ++i) {
    auto* w = new AcquireCall(
        &s->tracker,
        [st = s.get()](AcquireCall* c, const AcquireEvent& e, Clock::time_point) {
          if (e.type() == AcquireEvent::QUEUED) {
            std::lock_guard<std::mutex> l(st->mu);
            if (st->draining) ++st->drain_queued_events;
            if (c->queued_events == 1) {
              ++st->queued;
              st->cv.notify_all();
            }
          } else if (e.type() == AcquireEvent::ACQUIRED) {
            c->Release();  // hold time 0
          }
        },
        [st = s.get()](AcquireCall* c, const grpc::Status& status, Clock::time_point) {
          RecordDone(st, c, status, false);
        });
    w->client = i;
    w->Start(s->stubs[1 + i % channels].get(), open, rpc_deadline, false);
  }

  // Every waiter queued (its node exists, the order is fixed).
  {
    std::unique_lock<std::mutex> l(s->mu);
    bool all = s->cv.wait_for(l, queue_budget,
                              [&] { return s->queued + s->ended >= n || s->failed > 0; });
    if (!all || s->failed > 0) {
      std::string why = s->failed > 0 ? "a waiter failed while queueing"
                                      : "waiters did not all get QUEUED in time (" +
                                            std::to_string(s->queued) + "/" +
                                            std::to_string(n) + ")";
      l.unlock();
      return abort_run(why);
    }
  }
  // QUEUED is sent before the waiter's watch is armed: wait until ZooKeeper
  // holds at least one watch per waiter before taking the baseline.
  Mntr before, after;
  std::string mntr_error;
  const Clock::time_point watch_deadline = Clock::now() + Millis(10000);
  for (;;) {
    if (!ReadMntr(o.zk, &before, &mntr_error)) return abort_run("mntr: " + mntr_error);
    if (MntrValue(before, "zk_watch_count") >= n) break;
    if (Clock::now() >= watch_deadline) {
      return abort_run("ZooKeeper reports " +
                       std::to_string(static_cast<int64_t>(MntrValue(before, "zk_watch_count"))) +
                       " watches, expected at least " + std::to_string(n));
    }
    std::this_thread::sleep_for(Millis(20));
  }

  {
    std::lock_guard<std::mutex> l(s->mu);
    s->draining = true;
  }
  release_holder();
  {
    std::unique_lock<std::mutex> l(s->mu);
    bool drained = s->cv.wait_for(l, drain_budget,
                                  [&] { return s->ended >= n && s->holder_done; });
    if (!drained || s->failed > 0) {
      std::string why = !drained ? "the queue did not drain in time (" +
                                       std::to_string(s->ended) + "/" + std::to_string(n) + ")"
                                 : "a contender failed during the drain";
      l.unlock();
      return abort_run(why);
    }
  }
  // Read the counters once the last handoffs' notifications have landed
  // (one per handoff), or after a bounded wait.
  if (!ReadMntrWhen(o.zk, "zk_sum_node_deleted_watch_count",
                    MntrValue(before, "zk_sum_node_deleted_watch_count") + n,
                    Clock::now() + Millis(5000), &after, &mntr_error)) {
    return abort_run("mntr: " + mntr_error);
  }
  if (!s->tracker.WaitIdle(Clock::now() + Millis(10000))) {
    return abort_run("streams did not end");
  }

  std::lock_guard<std::mutex> l(s->mu);
  DrainSamples samples;
  samples.AddLock(std::move(s->recs));
  samples.Fill(/*at_once=*/false, &r);
  r.zk = CounterDelta(before, after);
  if (r.handoffs > 0) {
    r.packets_per_handoff = r.zk.packets / r.handoffs;
    r.notifications_per_handoff = r.zk.notifications / r.handoffs;
    r.queued_events_per_handoff = static_cast<double>(s->drain_queued_events) / r.handoffs;
  }
  return r;
}

}  // namespace turnstile::bench
