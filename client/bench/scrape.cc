// W6: what a /metrics scrape costs grants. W2's 16 clients hand one lock
// around while many waiters (--w5-waiters, over 100 other locks, each
// held) wait on the same replica, in slices interleaved with and without a
// scrape of the replica's /metrics every 100 ms; the handoff p99 with
// scrapes over the one without is the cost (target: at most 1.2).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/bench/acquire_call.h"
#include "client/bench/bench_internal.h"
#include "client/bench/report.h"
#include "client/bench/slices.h"
#include "client/bench/workloads.h"

namespace turnstile::bench {
namespace {

constexpr int kParkLocks = 100;
constexpr Millis kScrapeEvery(100);

// The sum of the samples whose lines start with `prefix`.
double SumOf(const std::string& text, const std::string& prefix) {
  double sum = 0;
  size_t pos = 0;
  while ((pos = text.find("\n" + prefix, pos)) != std::string::npos) {
    const size_t eol = text.find('\n', pos + 1);
    const size_t space = text.rfind(' ', eol);
    if (space != std::string::npos && space > pos) sum += std::atof(text.c_str() + space + 1);
    pos = eol == std::string::npos ? text.size() : eol;
  }
  return sum;
}

// Scrapes o.metrics every kScrapeEvery on a thread of its own while started.
class Scraper {
 public:
  explicit Scraper(std::string address) : address_(std::move(address)) {}
  ~Scraper() { Stop(); }
  void Start() {
    stop_ = false;
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  std::vector<double> ms;  // each scrape's duration (read after Stop)
  size_t bytes = 0;        // the last body's size
  // The most and fewest waiters a scrape reported, summed over locks.
  double most_waiters = -1, fewest_waiters = -1;
  std::string error;       // the first failure

 private:
  void Loop() {
    Clock::time_point next = Clock::now();
    for (;;) {
      {
        std::unique_lock<std::mutex> l(mu_);
        if (cv_.wait_until(l, next, [this] { return stop_; })) return;
      }
      next += kScrapeEvery;
      const Clock::time_point t0 = Clock::now();
      std::string why;
      std::string reply = FourLetterWord(address_, "GET /metrics HTTP/1.0\r\n\r\n",
                                         Millis(5000), &why);
      ms.push_back(ToMs(Clock::now() - t0));
      if (reply.rfind("HTTP/1.", 0) != 0 || reply.find(" 200 ") == std::string::npos ||
          reply.find("turnstile_lock_waiters") == std::string::npos) {
        if (error.empty()) {
          error = "scrape of http://" + address_ + "/metrics failed: " +
                  (why.empty() ? reply.substr(0, 80) : why);
        }
      } else {
        bytes = reply.size();
        const double w = SumOf(reply, "turnstile_lock_waiters{");
        most_waiters = std::max(most_waiters, w);
        fewest_waiters = fewest_waiters < 0 ? w : std::min(fewest_waiters, w);
      }
    }
  }

  const std::string address_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

// The parked waiters: every lock held by one stream, then `waiters` more
// queued behind the holders; all cancelled by the destructor.
struct Parked {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::LockService::Stub>> stubs;
  std::mutex mu;
  std::condition_variable cv;
  int acquired = 0;  // GUARDED_BY(mu)
  int queued = 0;    // GUARDED_BY(mu)
  int ended = 0;     // GUARDED_BY(mu) before the end: a failure
  std::string first_error;  // GUARDED_BY(mu)
  std::atomic<bool> closing{false};
  std::vector<AcquireCall*> holders;  // alive until released (hold)
  CallTracker tracker;  // last: destroyed (reaping calls) first

  ~Parked() {
    closing = true;
    for (AcquireCall* h : holders) h->Release();
    tracker.CancelAll();
    tracker.WaitIdle(Clock::now() + Millis(120000));
  }
  void Open(const AcquireOpen& open, bool holder, int channel, Clock::time_point deadline) {
    auto* c = new AcquireCall(
        &tracker,
        [this](AcquireCall* c, const AcquireEvent& e, Clock::time_point) {
          const bool first_queued = e.type() == AcquireEvent::QUEUED && c->queued_events == 1;
          if (e.type() != AcquireEvent::ACQUIRED && !first_queued) return;
          std::lock_guard<std::mutex> l(mu);
          ++(first_queued ? queued : acquired);
          cv.notify_all();
        },
        [this](AcquireCall* c, const grpc::Status& st, Clock::time_point) {
          if (closing) return;
          std::lock_guard<std::mutex> l(mu);
          ++ended;
          if (first_error.empty()) first_error = DescribeFailure("a parked lock", *c, st);
          cv.notify_all();
        });
    c->Start(stubs[channel].get(), open, deadline, /*hold=*/holder);
    if (holder) holders.push_back(c);
  }
  // Waits until `*count` reaches `n` (or a stream ended, or `deadline`).
  bool Await(int* count, int n, Clock::time_point deadline, std::string* error) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_until(l, deadline, [&] { return *count >= n || ended > 0; });
    if (*count >= n) return true;
    *error = ended > 0 ? first_error : "timed out at " + std::to_string(*count) + " of " +
                                           std::to_string(n);
    return false;
  }
};

void PrintSide(const char* label, const CycleResult& r) {
  std::printf("  %-22s %10.0f %12.3f %12.3f %10zu\n", label, r.per_second, r.handoff.p50_ms,
              r.handoff.p99_ms, r.handoff.count);
}

Json SideJson(const CycleResult& r) {
  return Json()
      .Num("cycles_per_s", r.per_second)
      .Int("handoffs", static_cast<int64_t>(r.handoff.count))
      .Num("handoff_p50_ms", r.handoff.p50_ms)
      .Num("handoff_p99_ms", r.handoff.p99_ms)
      .Int("errors", static_cast<int64_t>(r.errors));
}

}  // namespace

bool RunW6(const BenchOptions& o) {
  const int waiters = o.w5_waiters;
  const double secs = o.duration.count() / 1000.0;
  std::printf("\n== W6 scrape cost: W2 (%d clients, 1 lock) while %d waiters wait on %d other "
              "locks,\n   %.1f s per side, in %d slices interleaved: quiet, and with a scrape of "
              "http://%s/metrics every %lld ms\n",
              o.w2_clients, waiters, kParkLocks, secs, o.slices, o.metrics.c_str(),
              static_cast<long long>(kScrapeEvery.count()));
  std::fflush(stdout);
  std::vector<std::string> errors;
  Json j = JsonFor(o, "w6");
  j.Int("clients", o.w2_clients).Int("parked_waiters", waiters).Int("parked_locks", kParkLocks);
  bool ok = true;

  auto parked = std::make_unique<Parked>();
  const int channels = std::max(1, o.w5_channels);
  for (int i = 0; i < channels; ++i) {
    parked->channels.push_back(MakeChannel(o.server, 6000 + i));
    parked->stubs.push_back(v1::LockService::NewStub(parked->channels.back()));
  }
  std::string error;
  const Millis budget = Millis(60000) + Millis(20) * waiters;
  const Clock::time_point stream_deadline = Clock::now() + budget + o.duration * 4 + Millis(60000);
  std::vector<AcquireOpen> opens(kParkLocks);
  for (int i = 0; i < kParkLocks; ++i) {
    opens[i].set_name(LockName(o, "w6-park-" + std::to_string(i)));
    opens[i].set_owner("turnstile-bench");
    opens[i].mutable_wait_timeout()->set_seconds(
        std::chrono::duration_cast<std::chrono::seconds>(stream_deadline - Clock::now()).count());
  }
  bool parked_ok = ConnectAll(parked->channels, o.server, &error);
  if (parked_ok) {
    for (int i = 0; i < kParkLocks; ++i) parked->Open(opens[i], true, i % channels, stream_deadline);
    parked_ok = parked->Await(&parked->acquired, kParkLocks, Clock::now() + budget, &error);
  }
  if (parked_ok) {
    for (int k = 0; k < waiters; ++k) {
      parked->Open(opens[k % kParkLocks], false, k % channels, stream_deadline);
    }
    parked_ok = parked->Await(&parked->queued, waiters, Clock::now() + budget, &error);
  }
  if (!parked_ok) {
    errors.push_back("parking waiters: " + error);
    PrintJson(Finish(j, errors, &ok));
    return ok;
  }
  std::printf("  %d holders and %d waiters parked\n", kParkLocks, waiters);

  std::vector<std::string> names(o.w2_clients, LockName(o, "w6"));
  TurnstileCycles turnstile(o, names);
  CycleSamples quiet, scraped;
  if (!turnstile.Connect(&error)) {
    errors.push_back("turnstile: " + error);
    PrintJson(Finish(j, errors, &ok));
    return ok;
  }
  Scraper scraper(o.metrics);
  const Millis slice = SliceLength(o);
  Interleave(
      o.slices,
      [&](int) {
        quiet.Merge(turnstile.Run(slice));
        return quiet.errors == 0;
      },
      [&](int) {
        scraper.Start();
        scraped.Merge(turnstile.Run(slice));
        scraper.Stop();
        return scraped.errors == 0 && scraper.error.empty();
      });
  const CycleResult q = quiet.Result();
  const CycleResult s = scraped.Result();
  const Latency scrape = Summarize(scraper.ms);
  std::printf("  %-22s %10s %12s %12s %10s\n", "", "cycles/s", "handoff p50", "handoff p99",
              "handoffs");
  PrintSide("quiet", q);
  PrintSide("scraped every 100 ms", s);
  std::printf("  handoff p99 scraped / quiet: %s (target <= 1.2); %zu scrapes of %zu bytes, "
              "p50 %.1f ms, p99 %.1f ms; waiters per scrape %.0f..%.0f\n",
              Fmt(Ratio(s.handoff.p99_ms, q.handoff.p99_ms)).c_str(), scrape.count, scraper.bytes,
              scrape.p50_ms, scrape.p99_ms, scraper.fewest_waiters, scraper.most_waiters);
  j.Num("duration_s", secs)
      .Int("slices_per_side", o.slices)
      .Obj("quiet", SideJson(q))
      .Obj("scraped", SideJson(s))
      .Obj("scrapes", Json()
                          .Int("count", static_cast<int64_t>(scrape.count))
                          .Int("bytes", static_cast<int64_t>(scraper.bytes))
                          .Num("p50_ms", scrape.p50_ms)
                          .Num("p99_ms", scrape.p99_ms)
                          .Num("fewest_waiters", scraper.fewest_waiters)
                          .Num("most_waiters", scraper.most_waiters))
      .Obj("ratio", Json().Num("handoff_p99_ms", Ratio(s.handoff.p99_ms, q.handoff.p99_ms)));
  errors.push_back(ErrorOf(q, "quiet"));
  errors.push_back(ErrorOf(s, "scraped"));
  errors.push_back(scraper.error);
  if (q.errors == 0 && q.handoff.count == 0) errors.push_back("quiet: no handoff measured");
  if (s.errors == 0 && s.handoff.count == 0) errors.push_back("scraped: no handoff measured");
  if (scraper.error.empty() && scrape.count == 0) errors.push_back("no scrape was made");
  parked.reset();  // cancels the parked streams, before the JSON line says done
  PrintJson(Finish(j, errors, &ok));
  return ok;
}

BatchCounters ScrapeBatchCounters(const std::string& metrics_address) {
  BatchCounters c;
  std::string why;
  const std::string reply =
      FourLetterWord(metrics_address, "GET /metrics HTTP/1.0\r\n\r\n", Millis(3000), &why);
  if (reply.find(" 200 ") == std::string::npos ||
      reply.find("\nturnstile_zk_create_batches_total ") == std::string::npos) {
    return c;
  }
  c.ok = true;
  c.create_batches = SumOf(reply, "turnstile_zk_create_batches_total ");
  c.batched_creates = SumOf(reply, "turnstile_zk_batched_creates_total ");
  c.largest_create = SumOf(reply, "turnstile_zk_create_batch_largest ");
  c.delete_batches = SumOf(reply, "turnstile_zk_delete_batches_total ");
  c.batched_deletes = SumOf(reply, "turnstile_zk_batched_deletes_total ");
  c.largest_delete = SumOf(reply, "turnstile_zk_delete_batch_largest ");
  return c;
}

}  // namespace turnstile::bench
