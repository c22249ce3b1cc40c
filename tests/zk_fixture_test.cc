// Tests ZkServer against the real ZooKeeper, and the four-letter-word parsers
// against its real output. The ZooKeeper C client is used here only to
// create sessions and watches for the parsers to see.

#include "tests/zk_fixture.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/wait.h"

#ifndef THREADED
#define THREADED  // Declares the synchronous API of libzookeeper_mt.
#endif
#include <zookeeper/zookeeper.h>

namespace turnstile::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Key;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

void IgnoreEvent(zhandle_t*, int, int, const char*, void*) {}

// A C-client session; closed on destruction.
class Client {
 public:
  Client(const std::string& hosts, int session_timeout_ms) {
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zh_ = zookeeper_init(hosts.c_str(), IgnoreEvent, session_timeout_ms,
                         nullptr, nullptr, 0);
  }
  ~Client() {
    if (zh_ != nullptr) zookeeper_close(zh_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  zhandle_t* get() const { return zh_; }
  bool connected() const {
    return zh_ != nullptr && zoo_state(zh_) == ZOO_CONNECTED_STATE;
  }
  bool WaitConnected(milliseconds timeout = milliseconds(30000)) const {
    return WaitFor([this] { return connected(); }, timeout);
  }
  // The session id the way `wchc` prints it.
  std::string SessionId() const {
    char buf[32];
    std::snprintf(
        buf, sizeof(buf), "0x%llx",
        static_cast<unsigned long long>(zoo_client_id(zh_)->client_id));
    return buf;
  }
  void Close() {
    zookeeper_close(zh_);
    zh_ = nullptr;
  }

 private:
  zhandle_t* zh_;
};

// The shared server outlives a test (and --gtest_repeat iterations).
std::string UniquePath(const std::string& name) {
  static int counter = 0;
  return "/zk_fixture_test_" + std::to_string(getpid()) + "_" +
         std::to_string(++counter) + "_" + name;
}

TEST(WaitForTest, ReturnsWhetherPredicateBecameTrue) {
  int calls = 0;
  EXPECT_TRUE(WaitFor([&] { return ++calls == 3; }, milliseconds(5000),
                      milliseconds(1)));
  EXPECT_EQ(calls, 3);
  calls = 0;
  EXPECT_FALSE(WaitFor(
      [&] {
        ++calls;
        return false;
      },
      milliseconds(0)));
  EXPECT_GE(calls, 1);  // Zero timeout still checks once.
}

TEST(ZkServerTest, StartStopRestart) {
  absl::StatusOr<std::unique_ptr<ZkServer>> started = ZkServer::Start();
  ASSERT_TRUE(started.ok()) << started.status();
  ZkServer& server = **started;
  const int port = server.port();
  EXPECT_GT(port, 0);
  EXPECT_EQ(server.ConnectString(), "127.0.0.1:" + std::to_string(port));
  EXPECT_TRUE(server.running());

  absl::StatusOr<std::string> ruok = server.FourLetterWord("ruok");
  ASSERT_TRUE(ruok.ok()) << ruok.status();
  EXPECT_EQ(*ruok, "imok");

  absl::StatusOr<std::map<std::string, std::string>> mntr = server.Mntr();
  ASSERT_TRUE(mntr.ok()) << mntr.status();
  EXPECT_THAT(*mntr, Contains(Key("zk_version")));
  EXPECT_EQ((*mntr)["zk_server_state"], "standalone");
  EXPECT_EQ((*mntr)["zk_watch_count"], "0");

  // No watches: `wchc` prints just an empty line.
  auto watches = server.WatchesBySession();
  ASSERT_TRUE(watches.ok()) << watches.status();
  EXPECT_THAT(*watches, IsEmpty());

  ASSERT_TRUE(server.Stop().ok());
  EXPECT_FALSE(server.running());
  EXPECT_FALSE(server.FourLetterWord("ruok").ok());
  EXPECT_TRUE(server.Stop().ok());  // Idempotent.

  absl::Status restarted = server.Restart();
  ASSERT_TRUE(restarted.ok()) << restarted;
  EXPECT_TRUE(server.running());
  EXPECT_EQ(server.port(), port);
  ruok = server.FourLetterWord("ruok");
  ASSERT_TRUE(ruok.ok()) << ruok.status();
  EXPECT_EQ(*ruok, "imok");
}

TEST(ZkServerTest, RestartKeepsSessionsAndData) {
  absl::StatusOr<std::unique_ptr<ZkServer>> started = ZkServer::Start();
  ASSERT_TRUE(started.ok()) << started.status();
  ZkServer& server = **started;

  Client client(server.ConnectString(), 30000);
  ASSERT_TRUE(client.WaitConnected());
  const std::string session = client.SessionId();
  ASSERT_EQ(zoo_create(client.get(), "/ephemeral", "x", 1, &ZOO_OPEN_ACL_UNSAFE,
                       ZOO_EPHEMERAL, nullptr, 0),
            ZOK);

  absl::Status restarted = server.Restart();
  ASSERT_TRUE(restarted.ok()) << restarted;
  // The client notices the dropped connection and reconnects by itself.
  // Usually within ~0.5 s, but ZooKeeper 3.8.0 has a startup race: a client
  // that connects after the port is bound but before the server runs gets
  // its connection neither served nor closed (NPE in NIOServerCnxn.close),
  // so the client waits for its receive timeout, 2/3 of the session timeout
  // (20 s here). The session timeout is long so the session outlives that.
  ASSERT_TRUE(client.WaitConnected(milliseconds(45000)));
  EXPECT_EQ(client.SessionId(), session);
  struct Stat stat;
  EXPECT_EQ(zoo_exists(client.get(), "/ephemeral", 0, &stat), ZOK);
}

TEST(ZkServerTest, FourLetterWordNeedsFourLetters) {
  EXPECT_EQ(SharedZkServer().FourLetterWord("ruokk").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SharedZkServerTest, AnswersRuok) {
  ZkServer& server = SharedZkServer();
  EXPECT_EQ(&server, &SharedZkServer());
  EXPECT_TRUE(server.running());
  absl::StatusOr<std::string> ruok = server.FourLetterWord("ruok");
  ASSERT_TRUE(ruok.ok()) << ruok.status();
  EXPECT_EQ(*ruok, "imok");
}

TEST(SharedZkServerTest, WatchParsersSeeRealWatches) {
  ZkServer& server = SharedZkServer();
  Client a(server.ConnectString(), 10000);
  Client b(server.ConnectString(), 10000);
  ASSERT_TRUE(a.WaitConnected());
  ASSERT_TRUE(b.WaitConnected());
  const std::string node = UniquePath("node");
  const std::string missing = UniquePath("missing");
  ASSERT_EQ(zoo_create(a.get(), node.c_str(), "v", 1, &ZOO_OPEN_ACL_UNSAFE, 0,
                       nullptr, 0),
            ZOK);

  char buf[16];
  int len = sizeof(buf);
  struct Stat stat;
  ASSERT_EQ(
      zoo_wget(a.get(), node.c_str(), IgnoreEvent, nullptr, buf, &len, &stat),
      ZOK);
  ASSERT_EQ(zoo_wexists(a.get(), missing.c_str(), IgnoreEvent, nullptr, &stat),
            ZNONODE);
  ASSERT_EQ(zoo_wexists(b.get(), node.c_str(), IgnoreEvent, nullptr, &stat),
            ZOK);
  // Child watches are not listed by wchc/wchp, only counted in mntr.
  String_vector children;
  ASSERT_EQ(
      zoo_wget_children(a.get(), node.c_str(), IgnoreEvent, nullptr, &children),
      ZOK);
  deallocate_String_vector(&children);

  auto by_session = server.WatchesBySession();
  ASSERT_TRUE(by_session.ok()) << by_session.status();
  EXPECT_THAT((*by_session)[a.SessionId()],
              UnorderedElementsAre(node, missing));
  EXPECT_THAT((*by_session)[b.SessionId()], ElementsAre(node));

  auto by_path = server.WatchesByPath();
  ASSERT_TRUE(by_path.ok()) << by_path.status();
  EXPECT_THAT((*by_path)[node],
              UnorderedElementsAre(a.SessionId(), b.SessionId()));
  EXPECT_THAT((*by_path)[missing], ElementsAre(a.SessionId()));

  auto mntr = server.Mntr();
  ASSERT_TRUE(mntr.ok()) << mntr.status();
  EXPECT_EQ((*mntr)["zk_watch_count"], "4");  // 3 data watches + 1 child watch.

  // Closing a session drops its watches; poll, the server does it async.
  const std::string gone = a.SessionId();
  a.Close();
  EXPECT_TRUE(WaitFor(
      [&] {
        auto w = server.WatchesBySession();
        return w.ok() && w->count(gone) == 0;
      },
      milliseconds(10000)));
  by_session = server.WatchesBySession();
  ASSERT_TRUE(by_session.ok()) << by_session.status();
  EXPECT_THAT(*by_session, Not(Contains(Key(gone))));
  EXPECT_THAT((*by_session)[b.SessionId()], ElementsAre(node));
}

}  // namespace
}  // namespace turnstile::testing
