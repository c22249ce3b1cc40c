// The C++ take-home consumer (tests/take_home): built outside the
// repository against the installed library, by cpp.sh (find_package) and
// cpp-pkgconfig.sh (pkg-config). Takes "take-home/cpp" (waiting at most
// 30 s), prints its fencing token, releases, exits 0.
#include <turnstile/client.h>

#include <chrono>
#include <iostream>

int main() {
  turnstile::client::ClientOptions options;
  options.target = "127.0.0.1:7400";
  auto client = turnstile::client::Client::Connect(options);
  if (!client.ok()) {
    std::cerr << "connect: " << client.status() << "\n";
    return 1;
  }
  turnstile::client::AcquireOptions acquire;
  acquire.wait_timeout = std::chrono::seconds(30);
  auto lock = (*client)->Acquire("take-home/cpp", acquire);
  if (!lock.ok()) {
    std::cerr << "acquire: " << lock.status() << "\n";
    return 1;
  }
  std::cout << "fencing_token=" << lock->fencing_token() << std::endl;
  if (absl::Status released = lock->Release(); !released.ok()) {
    std::cerr << "release: " << released << "\n";
    return 1;
  }
  return 0;
}
