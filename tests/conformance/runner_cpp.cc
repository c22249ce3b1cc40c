// The conformance runner for the C++ client library (issue 22): reads
// commands (JSON lines) on stdin, drives turnstile::client and writes events
// (JSON lines) on stdout; the protocol is in tests/conformance/README.md.
// Each acquire runs on a thread of its own (Client::Acquire blocks until
// the lock is held or the wait ends); state changes come from the
// library's on_change / on_revoke callbacks.
//
//   conformance_runner_cpp --server TARGET [--owner NAME]
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/json_quote.h"
#include "client/lib/client.h"
#include "tests/json_reader.h"

namespace {

namespace tc = turnstile::client;
using turnstile::JsonQuote;
using turnstile::testing::JsonParser;
using turnstile::testing::JsonValue;

std::mutex out_mu;

void Say(const std::string& json) {
  std::lock_guard<std::mutex> l(out_mu);
  std::fwrite(json.data(), 1, json.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string CodeName(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);  // "FAILED_PRECONDITION"
  return name;
}

std::string Error(const std::string& key, const std::string& id, const absl::Status& s) {
  return absl::StrCat("{", JsonQuote(key), ":", JsonQuote(id), ",\"event\":\"error\",\"code\":",
                      JsonQuote(CodeName(s.code())), ",\"message\":",
                      JsonQuote(std::string(s.message())), "}");
}

std::string Strings(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? "," : "", JsonQuote(v[i]));
  return out + "]";
}

class Runner {
 public:
  explicit Runner(std::unique_ptr<tc::Client> client) : client_(std::move(client)) {}

  void Acquire(const JsonValue& cmd) {
    const std::string hold = cmd["hold"].str;
    tc::AcquireOptions o;
    o.wait_timeout = tc::Millis(static_cast<int64_t>(cmd["wait_ms"].number));
    o.ttl = tc::Millis(static_cast<int64_t>(cmd["ttl_ms"].number));
    o.owner = cmd["owner"].str;
    o.shared = cmd["kind"].str == "shared";
    if (cmd["kind"].str == "semaphore") o.max_holders = static_cast<int32_t>(cmd["max_holders"].number);
    o.lock_delay = tc::Millis(static_cast<int64_t>(cmd["lock_delay_ms"].number));
    o.revoke_holders = cmd["revoke_holders"].b;
    o.revoke_reason = cmd["revoke_reason"].str;
    for (const auto& [k, v] : cmd["metadata"].object) o.metadata[k] = v.str;
    o.on_queued = [hold](int64_t position) {
      Say(absl::StrCat("{\"hold\":", JsonQuote(hold), ",\"event\":\"queued\",\"position\":",
                       position, "}"));
    };
    o.on_revoke = [hold](const std::string& requester, const std::string& reason) {
      Say(absl::StrCat("{\"hold\":", JsonQuote(hold),
                       ",\"event\":\"revoke_requested\",\"requester\":", JsonQuote(requester),
                       ",\"reason\":", JsonQuote(reason), "}"));
    };
    o.on_change = [hold](const tc::LockStatus& s) {
      switch (s.state) {
        case tc::LockState::kSuspended:
          Say(absl::StrCat("{\"hold\":", JsonQuote(hold), ",\"event\":\"suspended\"}"));
          break;
        case tc::LockState::kHeld:
          Say(absl::StrCat("{\"hold\":", JsonQuote(hold), ",\"event\":\"resumed\"}"));
          break;
        case tc::LockState::kLost:
          Say(absl::StrCat("{\"hold\":", JsonQuote(hold), ",\"event\":\"lost\",\"reason\":",
                           JsonQuote(s.lost_reason), ",\"message\":", JsonQuote(s.message), "}"));
          break;
        case tc::LockState::kReleased:
          Say(absl::StrCat("{\"hold\":", JsonQuote(hold), ",\"event\":\"released\"}"));
          break;
      }
    };
    absl::StatusOr<tc::Lock> lock = client_->Acquire(cmd["lock"].str, o);
    if (!lock.ok()) {
      Say(Error("hold", hold, lock.status()));
      return;
    }
    const std::string acquired =
        absl::StrCat("{\"hold\":", JsonQuote(hold), ",\"event\":\"acquired\",\"token\":",
                     lock->fencing_token(), ",\"lease_id\":", JsonQuote(lock->lease_id()), "}");
    {
      std::lock_guard<std::mutex> l(mu_);
      locks_.emplace(hold, std::make_shared<tc::Lock>(std::move(*lock)));
    }
    Say(acquired);
  }

  void Release(const JsonValue& cmd) {
    const std::string hold = cmd["hold"].str;
    std::shared_ptr<tc::Lock> lock;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = locks_.find(hold);
      if (it != locks_.end()) lock = it->second;
    }
    if (lock == nullptr) {
      Say(Error("hold", hold, absl::FailedPreconditionError("no such hold")));
      return;
    }
    // on_change reports RELEASED (or LOST, if it was lost first).
    if (absl::Status s = lock->Release(); !s.ok() && lock->status().state != tc::LockState::kLost) {
      Say(Error("hold", hold, s));
    }
  }

  void Unary(const JsonValue& cmd) {
    const std::string req = cmd["req"].str;
    const std::string op = cmd["cmd"].str;
    if (op == "describe") {
      auto d = client_->Describe(cmd["lock"].str);
      if (!d.ok()) return Say(UnaryError(req, d.status()));
      // A free lock: the protocol's reply for it, as every runner's.
      if (!d->has_value()) {
        return Say(absl::StrCat("{\"req\":", JsonQuote(req), ",\"error\":\"NOT_FOUND\"}"));
      }
      const tc::Description& desc = **d;
      std::vector<std::string> holders, waiters, identities;
      for (const auto& c : desc.holders) holders.push_back(c.owner);
      for (const auto& c : desc.holders) identities.push_back(c.identity);
      for (const auto& c : desc.waiters) waiters.push_back(c.owner);
      Say(absl::StrCat("{\"req\":", JsonQuote(req), ",\"holders\":", Strings(holders),
                       ",\"waiters\":", Strings(waiters), ",\"holder_identities\":",
                       Strings(identities), ",\"max_holders\":", desc.max_holders,
                       "}"));
    } else if (op == "list") {
      auto names = client_->List(cmd["prefix"].str);
      if (!names.ok()) return Say(UnaryError(req, names.status()));
      Say(absl::StrCat("{\"req\":", JsonQuote(req), ",\"names\":", Strings(names->names), "}"));
    } else if (op == "revoke") {
      absl::Status s = client_->Revoke(cmd["lease_id"].str, cmd["reason"].str);
      if (!s.ok()) return Say(UnaryError(req, s));
      Say(absl::StrCat("{\"req\":", JsonQuote(req), ",\"ok\":true}"));
    } else if (op == "check") {
      // A token is a number (exact below 2^53, as zxids of a test are) or
      // a decimal string.
      uint64_t token = 0;
      const JsonValue& t = cmd["token"];
      if (t.IsNumber()) {
        token = static_cast<uint64_t>(t.number);
      } else if (!absl::SimpleAtoi(t.str, &token)) {
        return Say(UnaryError(req, absl::InvalidArgumentError("token is not a number")));
      }
      auto c = client_->CheckToken(cmd["lock"].str, token, cmd["stale"].b);
      if (!c.ok()) return Say(UnaryError(req, c.status()));
      Say(absl::StrCat("{\"req\":", JsonQuote(req), ",\"verdict\":",
                       JsonQuote(tc::VerdictName(c->verdict)), ",\"highest_holder_token\":",
                       c->highest_holder_token, ",\"linearizable\":",
                       c->linearizable ? "true" : "false", "}"));
    }
  }

  void ReleaseAll() {
    std::map<std::string, std::shared_ptr<tc::Lock>> locks;
    {
      std::lock_guard<std::mutex> l(mu_);
      locks.swap(locks_);
    }
    for (auto& [hold, lock] : locks) (void)lock->Release();
  }

 private:
  static std::string UnaryError(const std::string& req, const absl::Status& s) {
    return absl::StrCat("{\"req\":", JsonQuote(req), ",\"error\":", JsonQuote(CodeName(s.code())),
                        ",\"message\":", JsonQuote(std::string(s.message())), "}");
  }

  std::unique_ptr<tc::Client> client_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<tc::Lock>> locks_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string target, owner;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--server") target = argv[i + 1];
    if (std::string(argv[i]) == "--owner") owner = argv[i + 1];
  }
  if (target.empty()) {
    std::fprintf(stderr, "usage: conformance_runner_cpp --server TARGET\n");
    return 2;
  }
  tc::ClientOptions options;
  options.target = target;
  options.default_owner = owner;  // the requester of its Revokes
  auto client = tc::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "conformance_runner_cpp: %s\n", client.status().ToString().c_str());
    return 1;
  }
  Runner runner(std::move(*client));
  Say("{\"event\":\"ready\",\"lang\":\"cpp\"}");
  std::vector<std::thread> threads;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    JsonValue cmd;
    JsonParser parser(line);
    if (!parser.Parse(&cmd) || cmd.kind != JsonValue::kObject) {
      Say(absl::StrCat("{\"event\":\"error\",\"code\":\"BAD_COMMAND\",\"message\":",
                       JsonQuote(parser.error()), "}"));
      continue;
    }
    const std::string op = cmd["cmd"].str;
    if (op == "quit") break;
    if (op == "acquire") {
      threads.emplace_back([&runner, cmd] { runner.Acquire(cmd); });
    } else if (op == "release") {
      threads.emplace_back([&runner, cmd] { runner.Release(cmd); });
    } else if (op == "describe" || op == "list" || op == "revoke" || op == "check") {
      threads.emplace_back([&runner, cmd] { runner.Unary(cmd); });
    } else {
      Say(absl::StrCat("{\"event\":\"error\",\"code\":\"UNKNOWN_COMMAND\",\"message\":",
                       JsonQuote(line), "}"));
    }
  }
  runner.ReleaseAll();
  // Waits still blocked in Acquire end with the process (their streams are
  // cancelled by the library's destructors at exit).
  for (auto& t : threads) t.detach();
  std::fflush(stdout);
  std::_Exit(0);
}
