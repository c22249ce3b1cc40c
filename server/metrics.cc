#include "server/metrics.h"

#include <algorithm>
#include <iterator>
#include <exception>
#include <map>
#include <set>
#include <unordered_map>

#include "absl/strings/ascii.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

#ifndef TURNSTILE_VERSION
#define TURNSTILE_VERSION "unknown"
#endif

namespace turnstile {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

const char* const kMethodNames[] = {"Acquire", "Release", "KeepAlive", "Describe", "List",
                                    "Revoke",  "Observe", "Proclaim",  "CheckToken"};

const char* GrpcCodeName(int code) {
  static const char* const kNames[] = {
      "OK",        "CANCELLED",          "UNKNOWN",           "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",    "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",       "DATA_LOSS",
      "UNAUTHENTICATED"};
  if (code < 0 || code >= 17) return "UNKNOWN";
  return kNames[code];
}

int MethodIndex(const char* method) {
  for (int i = 0; i < static_cast<int>(std::size(kMethodNames)); ++i) {
    if (std::string_view(method) == kMethodNames[i]) return i;
  }
  return -1;
}

Histogram::BucketBoundaries WaitBuckets() {
  return {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600};
}
Histogram::BucketBoundaries HandoffBuckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25, 0.5, 1};
}
Histogram::BucketBoundaries ZkBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

prometheus::ClientMetric GaugeMetric(double value,
                                     std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  return m;
}

prometheus::ClientMetric CounterMetric(double value) {
  prometheus::ClientMetric m;
  m.counter.value = value;
  return m;
}

}  // namespace

// Computed at scrape time: per-lock waiters/holders, session up, serving.
class Metrics::LiveCollector final : public prometheus::Collectable {
 public:
  LiveCollector(LockEngine* engine, std::vector<ZkSession*> sessions, size_t max_locks,
                std::optional<std::vector<std::string>> label_prefixes)
      : engine_(engine),
        sessions_(std::move(sessions)),
        max_locks_(max_locks),
        label_prefixes_(std::move(label_prefixes)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<LockLoad> loads;
    {
      // Scrapes may come at once; the loads' cache takes one at a time.
      absl::MutexLock l(&loads_mu_);
      loads = engine_->LockLoads(&loads_cache_);
    }
    // First come first served: earlier contenders claim labels first.
    std::sort(loads.begin(), loads.end(),
              [](const LockLoad& a, const LockLoad& b) { return a.first_id < b.first_id; });
    prometheus::MetricFamily waiters{"turnstile_lock_waiters",
                                     "Contenders waiting for each lock on this replica "
                                     "(lock=\"_overflow\" sums locks past --metrics-max-locks, "
                                     "lock=\"_hidden\" those outside --metrics-lock-prefixes).",
                                     prometheus::MetricType::Gauge, {}};
    prometheus::MetricFamily holders{"turnstile_lock_holders",
                                     "Contenders holding each lock on this replica "
                                     "(lock=\"_overflow\" sums locks past --metrics-max-locks, "
                                     "lock=\"_hidden\" those outside --metrics-lock-prefixes).",
                                     prometheus::MetricType::Gauge, {}};
    prometheus::MetricFamily permits{"turnstile_lock_max_holders",
                                     "A semaphore's N (how many may hold it at once), for each "
                                     "semaphore with contenders on this replica whose name "
                                     "has its own series; absent for exclusive and shared locks.",
                                     prometheus::MetricType::Gauge, {}};
    {
      absl::MutexLock l(&mu_);
      // A lock keeps its label while it has contenders.
      std::set<std::string> live;
      for (const LockLoad& load : loads) live.insert(load.name);
      for (auto it = labeled_.begin(); it != labeled_.end();) {
        it = live.count(*it) ? std::next(it) : labeled_.erase(it);
      }
      int64_t over_waiters = 0, over_holders = 0, hidden_waiters = 0, hidden_holders = 0;
      bool overflow = false, hidden = false;
      for (const LockLoad& load : loads) {
        if (!MayShow(load.name)) {
          hidden = true;
          hidden_waiters += load.waiters;
          hidden_holders += load.holders;
          continue;
        }
        bool own = labeled_.count(load.name) > 0;
        if (!own && labeled_.size() < max_locks_) {
          labeled_.insert(load.name);
          own = true;
        }
        if (own) {
          waiters.metric.push_back(GaugeMetric(static_cast<double>(load.waiters),
                                               {{"lock", load.name}}));
          holders.metric.push_back(GaugeMetric(static_cast<double>(load.holders),
                                               {{"lock", load.name}}));
          if (load.max_holders > 0) {
            permits.metric.push_back(GaugeMetric(static_cast<double>(load.max_holders),
                                                 {{"lock", load.name}}));
          }
        } else {
          overflow = true;
          over_waiters += load.waiters;
          over_holders += load.holders;
        }
      }
      if (overflow) {
        waiters.metric.push_back(GaugeMetric(static_cast<double>(over_waiters),
                                             {{"lock", kOverflowLockLabel}}));
        holders.metric.push_back(GaugeMetric(static_cast<double>(over_holders),
                                             {{"lock", kOverflowLockLabel}}));
      }
      if (hidden) {
        waiters.metric.push_back(GaugeMetric(static_cast<double>(hidden_waiters),
                                             {{"lock", kHiddenLockLabel}}));
        holders.metric.push_back(GaugeMetric(static_cast<double>(hidden_holders),
                                             {{"lock", kHiddenLockLabel}}));
      }
    }
    std::vector<prometheus::MetricFamily> out;
    out.push_back(std::move(waiters));
    out.push_back(std::move(holders));
    if (!permits.metric.empty()) out.push_back(std::move(permits));
    bool all_up = std::all_of(sessions_.begin(), sessions_.end(),
                              [](ZkSession* s) { return s->connected(); });
    out.push_back({"turnstile_zk_session_up",
                   "1 when every ZooKeeper session of this replica (--zk-sessions) is "
                   "connected, else 0.",
                   prometheus::MetricType::Gauge,
                   {GaugeMetric(all_up ? 1 : 0)}});
    out.push_back({"turnstile_locks_in_delay",
                   "Locks of this replica in lock-delay now (a hold ended involuntarily; "
                   "no grant until its delay has passed).",
                   prometheus::MetricType::Gauge,
                   {GaugeMetric(static_cast<double>(engine_->stats().locks_in_delay))}});
    // Batched writes (issue 39): multis of creates and the creates in them
    // (mean batch = creates / batches), the largest batch so far; the same
    // for deletes.
    const EngineStats st = engine_->stats();
    struct Batched {
      const char* name;
      const char* help;
      bool counter;
      double value;
    };
    const Batched batched[] = {
        {"turnstile_zk_create_batches_total",
         "Multis this replica sent carrying two or more contender creates (--batch-zk-writes).",
         true, static_cast<double>(st.create_batches)},
        {"turnstile_zk_batched_creates_total", "Contender creates sent inside those multis.",
         true, static_cast<double>(st.batched_creates)},
        {"turnstile_zk_create_batch_largest",
         "The most contender creates one multi of this replica has carried.", false,
         static_cast<double>(st.largest_create_batch)},
        {"turnstile_zk_delete_batches_total",
         "Multis this replica sent carrying two or more plain contender deletes.", true,
         static_cast<double>(st.delete_batches)},
        {"turnstile_zk_batched_deletes_total", "Contender deletes sent inside those multis.",
         true, static_cast<double>(st.batched_deletes)},
        {"turnstile_zk_delete_batch_largest",
         "The most contender deletes one multi of this replica has carried.", false,
         static_cast<double>(st.largest_delete_batch)},
    };
    for (const Batched& m : batched) {
      out.push_back({m.name, m.help,
                     m.counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge,
                     {m.counter ? CounterMetric(m.value) : GaugeMetric(m.value)}});
    }
    out.push_back({"turnstile_serving",
                   "1 when this replica serves (health SERVING), else 0.",
                   prometheus::MetricType::Gauge,
                   {GaugeMetric(engine_->serving() ? 1 : 0)}});
    return out;
  }

 private:
  bool MayShow(const std::string& name) const {
    if (!label_prefixes_) return true;
    for (const std::string& p : *label_prefixes_) {
      if (name.compare(0, p.size(), p) == 0) return true;
    }
    return false;
  }

  LockEngine* const engine_;
  const std::vector<ZkSession*> sessions_;
  const size_t max_locks_;
  const std::optional<std::vector<std::string>> label_prefixes_;
  mutable absl::Mutex mu_;  // a leaf
  mutable std::set<std::string> labeled_ ABSL_GUARDED_BY(mu_);
  // The loads as last read (LockEngine::LockLoads); held across the read,
  // so that two scrapes apply the shards' changes in the order read.
  mutable absl::Mutex loads_mu_;
  mutable LockEngine::LoadsCache loads_cache_ ABSL_GUARDED_BY(loads_mu_);
};

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Start(const MetricsOptions& options,
                                                        LockEngine* engine, std::vector<ZkSession*> sessions) {
  if (options.max_locks < 0) {
    return absl::InvalidArgumentError("--metrics-max-locks must be >= 0");
  }
  std::unique_ptr<Metrics> m(new Metrics());
  m->registry_ = std::make_shared<prometheus::Registry>();
  prometheus::Registry& r = *m->registry_;

  BuildGauge()
      .Name("turnstile_build_info")
      .Help("Always 1; the version label names the turnstiled build.")
      .Register(r)
      .Add({{"version", options.version.empty() ? TURNSTILE_VERSION : options.version}})
      .Set(1);

  auto& wait = BuildHistogram()
                   .Name("turnstile_acquire_wait_seconds")
                   .Help("Time from Acquire open to the end of the wait, by result.")
                   .Register(r);
  auto& acquires = BuildCounter()
                       .Name("turnstile_acquires_total")
                       .Help("Acquire waits ended on this replica, by result.")
                       .Register(r);
  for (int i = 0; i < static_cast<int>(AcquireResult::kCount); ++i) {
    std::string result = AcquireResultName(static_cast<AcquireResult>(i));
    m->wait_[i] = &wait.Add({{"result", result}}, WaitBuckets());
    m->acquires_[i] = &acquires.Add({{"result", result}});
  }
  m->hold_ = &BuildHistogram()
                  .Name("turnstile_hold_seconds")
                  .Help("Time from grant to the end of the hold.")
                  .Register(r)
                  .Add({}, WaitBuckets());
  m->handoff_ = &BuildHistogram()
                     .Name("turnstile_handoff_seconds")
                     .Help("From learning a waiter's last blocker is gone to its grant.")
                     .Register(r)
                     .Add({}, HandoffBuckets());
  auto& lost = BuildCounter()
                   .Name("turnstile_locks_lost_total")
                   .Help("Holds ended by LOST, by reason.")
                   .Register(r);
  for (int i = 0; i < 4; ++i) {
    m->lost_[i] = &lost.Add({{"reason", LostReasonName(static_cast<LostReason>(i))}});
  }
  auto& zk_dur = BuildHistogram()
                     .Name("turnstile_zk_request_duration_seconds")
                     .Help("ZooKeeper request latency (issue to completion), by operation.")
                     .Register(r);
  for (int i = 0; i < kZkOps; ++i) {
    m->zk_duration_[i] = &zk_dur.Add({{"op", ZkOpName(static_cast<ZkOp>(i))}}, ZkBuckets());
  }
  m->zk_errors_family_ = &BuildCounter()
                              .Name("turnstile_zk_request_errors_total")
                              .Help("ZooKeeper requests that completed with an error, by "
                                    "operation and code.")
                              .Register(r);
  auto& revokes = BuildCounter()
                      .Name("turnstile_revocations_total")
                      .Help("Cooperative revocation requests: written by this replica "
                            "(step=requested: Revoke, or a waiter that asked) and told to "
                            "holders on it (step=delivered).")
                      .Register(r);
  m->revokes_requested_ = &revokes.Add({{"step", "requested"}});
  m->revokes_delivered_ = &revokes.Add({{"step", "delivered"}});
  m->expirations_ = &BuildCounter()
                         .Name("turnstile_zk_session_expirations_total")
                         .Help("ZooKeeper session expirations seen by this replica.")
                         .Register(r)
                         .Add({});
  m->watch_events_ = &BuildCounter()
                          .Name("turnstile_zk_watch_events_total")
                          .Help("ZooKeeper watch events delivered to this replica.")
                          .Register(r)
                          .Add({});
  auto& streams = BuildGauge()
                      .Name("turnstile_open_streams")
                      .Help("Open gRPC streams on this replica, by kind.")
                      .Register(r);
  m->streams_acquire_ = &streams.Add({{"kind", "acquire"}});
  m->streams_keepalive_ = &streams.Add({{"kind", "keepalive"}});
  m->streams_observe_ = &streams.Add({{"kind", "observe"}});
  m->tls_expiry_family_ =
      &BuildGauge()
           .Name("turnstile_tls_certificate_expiry_timestamp_seconds")
           .Help("When the TLS certificate this replica serves expires (notAfter, Unix "
                 "seconds); follows certificate reloads.")
           .Register(r);
  m->still_held_dropped_ =
      &BuildCounter()
           .Name("turnstile_still_held_dropped_total")
           .Help("STILL_HELD events replaced by a newer one before they were written: the "
                 "holder's client stopped reading (at most one is kept pending per stream).")
           .Register(r)
           .Add({});
  m->quota_refusals_family_ =
      &BuildCounter()
           .Name("turnstile_quota_refusals_total")
           .Help("Stream opens refused by a quota of the policy file, by quota name and "
                 "limit (streams, contenders, opens).")
           .Register(r);
  m->quota_refusals_waiting_ =
      &BuildGauge()
           .Name("turnstile_quota_refusals_waiting")
           .Help("Quota refusals waiting out --quota-refusal-delay before they are answered "
                 "(at most 1024 per replica; beyond, refusals are answered at once).")
           .Register(r)
           .Add({});
  m->grpc_family_ = &BuildCounter()
                         .Name("turnstile_grpc_requests_total")
                         .Help("Finished gRPC requests, by method and status code.")
                         .Register(r);
  // Every method x code series exists from the start at 0: a series born at
  // its first request would hide that request from rate() and increase()
  // (its first sample already holds it), so the first error of a kind would
  // never show on the dashboard or in an alert. 5 x 17 series per replica.
  for (int mi = 0; mi < kMethods; ++mi) {
    for (int c = 0; c < kGrpcCodes; ++c) {
      m->grpc_[mi][c] = &m->grpc_family_->Add({{"method", kMethodNames[mi]}, {"code", GrpcCodeName(c)}});
    }
  }
  m->live_ = std::make_shared<LiveCollector>(engine, std::move(sessions),
                                             static_cast<size_t>(options.max_locks),
                                             options.lock_label_prefixes);

  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(options.listen, 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", options.listen, ": ", e.what()));
  }
  std::vector<int> ports = m->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot listen for metrics on ", options.listen));
  }
  m->port_ = ports.front();
  m->exposer_->RegisterCollectable(m->registry_);
  m->exposer_->RegisterCollectable(m->live_);
  return m;
}

Metrics::~Metrics() { exposer_.reset(); }

void Metrics::OnWaitEnded(AcquireResult result, double wait_seconds) {
  int i = static_cast<int>(result);
  if (i < 0 || i >= static_cast<int>(AcquireResult::kCount)) return;
  wait_[i]->Observe(wait_seconds);
  acquires_[i]->Increment();
}

void Metrics::OnHoldEnded(double hold_seconds) { hold_->Observe(hold_seconds); }

void Metrics::OnHandoff(double seconds) { handoff_->Observe(seconds); }

void Metrics::OnLost(LostReason reason) {
  int i = static_cast<int>(reason);
  if (i >= 0 && i < 4) lost_[i]->Increment();
}

void Metrics::OnRevokeRequested() { revokes_requested_->Increment(); }
void Metrics::OnRevokeDelivered() { revokes_delivered_->Increment(); }

void Metrics::OnRequestDone(ZkOp op, ZkCode code, double seconds) {
  int o = static_cast<int>(op);
  if (o < 0 || o >= kZkOps) return;
  zk_duration_[o]->Observe(seconds);
  if (code == ZkCode::kOk) return;
  int c = static_cast<int>(code);
  if (c < 0 || c >= kZkCodes) return;
  prometheus::Counter* counter = zk_errors_[o][c].load(std::memory_order_acquire);
  if (counter == nullptr) {
    absl::MutexLock l(&lazy_mu_);
    counter = zk_errors_[o][c].load(std::memory_order_acquire);
    if (counter == nullptr) {
      counter = &zk_errors_family_->Add(
          {{"op", ZkOpName(op)}, {"code", absl::AsciiStrToLower(ZkCodeName(code))}});
      zk_errors_[o][c].store(counter, std::memory_order_release);
    }
  }
  counter->Increment();
}

void Metrics::OnWatchEvent() { watch_events_->Increment(); }

void Metrics::OnSessionExpired() { expirations_->Increment(); }

void Metrics::OnRequestDone(const char* method, int code) {
  int mi = MethodIndex(method);
  if (mi < 0 || code < 0 || code >= kGrpcCodes) return;
  grpc_[mi][code]->Increment();
}

void Metrics::OnStreamsChanged(const char* kind, int delta) {
  prometheus::Gauge* g = std::string_view(kind) == "keepalive" ? streams_keepalive_
                         : std::string_view(kind) == "observe" ? streams_observe_
                                                               : streams_acquire_;
  g->Increment(static_cast<double>(delta));
}

void Metrics::OnStillHeldDropped() { still_held_dropped_->Increment(); }

void Metrics::OnQuotaRefused(const std::string& quota, const char* limit) {
  // Family::Add finds the series when it exists (thread-safe).
  quota_refusals_family_->Add({{"quota", quota}, {"limit", limit}}).Increment();
}

void Metrics::OnRefusalsWaiting(int delta) {
  quota_refusals_waiting_->Increment(static_cast<double>(delta));
}

void Metrics::SetTlsCertificateExpiry(int64_t unix_seconds) {
  prometheus::Gauge* g = tls_expiry_.load();
  if (g == nullptr) {
    // The first set (start-up) and a reload cannot race, but be sure.
    ABSL_CONST_INIT static absl::Mutex mu(absl::kConstInit);
    absl::MutexLock l(&mu);
    g = tls_expiry_.load();
    if (g == nullptr) {
      g = &tls_expiry_family_->Add({});
      tls_expiry_.store(g);
    }
  }
  g->Set(static_cast<double>(unix_seconds));
}

}  // namespace turnstile
