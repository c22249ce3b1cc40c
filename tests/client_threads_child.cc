// A client process for tests that look at the threads the C++ client library
// brings into a process (client_lib_test's in-process replicas bring their
// own): takes N holds on PREFIX-0..N-1 through two turnstile::client::Clients
// (every other one a TTL lease, and waits until those were renewed), prints
// "HELD N", one "THREAD <name>" line per thread of the process
// (/proc/self/task/*/comm), releases every hold and prints "RELEASED".
// "ERROR <what>" and exit status 1 on failure.
// Usage: client_threads_child ADDRESS PREFIX N
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "client/lib/client.h"
#include "tests/wait.h"

namespace tc = ::turnstile::client;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

static int Fail(const std::string& what) {
  std::printf("ERROR %s\n", what.c_str());
  std::fflush(stdout);
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: client_threads_child ADDRESS PREFIX N\n");
    return 2;
  }
  tc::ClientOptions options;
  options.target = argv[1];
  options.default_owner = "client_threads_child";
  const std::string prefix = argv[2];
  const int n = std::atoi(argv[3]);
  std::unique_ptr<tc::Client> clients[2];
  for (auto& c : clients) {
    auto connected = tc::Client::Connect(options);
    if (!connected.ok()) return Fail(std::string(connected.status().message()));
    c = std::move(*connected);
  }

  const milliseconds ttl(1000);
  std::vector<tc::Lock> holds;
  std::vector<steady_clock::time_point> granted;
  for (int i = 0; i < n; ++i) {
    tc::AcquireOptions o;
    o.wait_timeout = milliseconds(10000);
    if (i % 2 == 1) o.ttl = ttl;
    auto held = clients[(i / 2) % 2]->Acquire(prefix + "-" + std::to_string(i), o);
    if (!held.ok()) return Fail("Acquire " + std::to_string(i) + ": " + held.status().ToString());
    granted.push_back(steady_clock::now());
    holds.push_back(std::move(*held));
  }
  // The TTL leases renewed (over the Client's KeepAlive stream): valid
  // beyond the grant's TTL.
  if (!turnstile::testing::WaitFor([&] {
        for (int i = 1; i < n; i += 2) {
          if (steady_clock::now() + holds[i].status().valid_for <=
              granted[i] + ttl + milliseconds(100)) {
            return false;
          }
        }
        return true;
      }, milliseconds(10000))) {
    return Fail("the TTL leases were not renewed");
  }
  std::printf("HELD %d\n", n);
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    std::printf("THREAD %s\n", name.c_str());
  }
  std::fflush(stdout);
  for (int i = 0; i < n; ++i) {
    absl::Status st = holds[i].Release();
    if (!st.ok()) return Fail("Release " + std::to_string(i) + ": " + st.ToString());
  }
  std::printf("RELEASED\n");
  std::fflush(stdout);
  return 0;
}
