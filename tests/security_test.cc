// Security is configuration: TLS on the gRPC port (--tls-cert-file,
// --tls-key-file) and ZooKeeper auth (--zk-auth-file: nodes get the
// creator-only ACL). Real replicas on the shared real ZooKeeper; certificates
// are made per test run with the openssl CLI (nothing secret is committed).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/recipe/lock_name.h"
#include "server/replica.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

int Shell(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/turnstile-sec-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    connect_ = SharedZkServer().ConnectString();
    root_ = UniqueRoot("sec");
  }
  void TearDown() override { (void)std::system(("rm -rf '" + dir_ + "'").c_str()); }

  // A self-signed certificate for 127.0.0.1 / localhost: <name>.crt, <name>.key.
  void MakeCert(const std::string& name) {
    std::string cmd = absl::StrCat(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 ",
        "-subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost ",
        "-keyout '", dir_, "/", name, ".key' -out '", dir_, "/", name, ".crt' > '", dir_,
        "/openssl.log' 2>&1");
    ASSERT_EQ(Shell(cmd), 0) << ReadFile(dir_ + "/openssl.log");
  }

  std::unique_ptr<v1::LockService::Stub> TlsStub(const std::string& address,
                                                 const std::string& ca_file) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(ca_file);
    return v1::LockService::NewStub(grpc::CreateChannel(address, grpc::SslCredentials(ssl)));
  }

  // Describe with a short deadline; the status code.
  grpc::StatusCode DescribeCode(v1::LockService::Stub* stub) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::DescribeRequest req;
    req.set_name("tls-lock");
    v1::DescribeResponse resp;
    return stub->Describe(&ctx, req, &resp).error_code();
  }

  std::string dir_, connect_, root_;
};

TEST_F(SecurityTest, TlsServesOnlyClientsThatTrustTheCertificate) {
  MakeCert("server");
  MakeCert("other");
  ReplicaConfig cfg = TestConfig(connect_, root_);
  cfg.tls_cert_file = dir_ + "/server.crt";
  cfg.tls_key_file = dir_ + "/server.key";
  auto r = StartReplica(cfg);
  ASSERT_TRUE(r);
  const std::string address = absl::StrCat("127.0.0.1:", r->port());

  // A client trusting the certificate: a full Acquire round trip.
  auto stub = TlsStub(address, dir_ + "/server.crt");
  AcquireStream s(stub.get(), OpenMsg("tls-lock", milliseconds(10000), "tls-owner"));
  auto got = s.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(got);
  EXPECT_GT(got->acquired().fencing_token(), 0);
  EXPECT_EQ(DescribeCode(stub.get()), grpc::StatusCode::OK);

  // Plaintext, and TLS trusting another certificate, are refused; the
  // holder is undisturbed.
  EXPECT_EQ(DescribeCode(NewStub(address).get()), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(DescribeCode(TlsStub(address, dir_ + "/other.crt").get()),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(s.Next(milliseconds(0)).has_value());

  // The CLI: --tls-ca-file works, plaintext does not.
  std::string cli = absl::StrCat(std::string(CLI_PATH), " --server ", address, " --rpc-timeout 3s ");
  EXPECT_EQ(Shell(cli + "--tls-ca-file '" + dir_ + "/server.crt' health > /dev/null 2>&1"), 0);
  EXPECT_EQ(Shell(cli + "--tls-ca-file '" + dir_ + "/server.crt' describe tls-lock > '" + dir_ +
                "/describe.txt' 2>&1"),
            0);
  EXPECT_NE(ReadFile(dir_ + "/describe.txt").find("owner=tls-owner"), std::string::npos)
      << ReadFile(dir_ + "/describe.txt");
  EXPECT_EQ(Shell(cli + "health > /dev/null 2>&1"), 1);

  // The Python client with TLS credentials trusting the certificate sees the
  // holder; without them it gets UNAVAILABLE.
  const std::string py = absl::StrCat(
      "PYTHONPATH='", PY_PACKAGE_DIR, "' PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c '\n"
      "import sys, grpc\n"
      "from turnstile import Client, TurnstileError\n"
      "creds = grpc.ssl_channel_credentials(open(sys.argv[2], \"rb\").read())\n"
      "d = Client(sys.argv[1], credentials=creds).describe(\"tls-lock\")\n"
      "assert d.holders[0].owner == \"tls-owner\", d\n"
      "try:\n"
      "    Client(sys.argv[1], timeout=3).describe(\"tls-lock\")\n"
      "    raise SystemExit(\"plaintext Describe succeeded\")\n"
      "except TurnstileError as e:\n"
      "    assert e.code == grpc.StatusCode.UNAVAILABLE, e\n"
      "print(\"OK\")\n"
      "' ", address, " '", dir_, "/server.crt' > '", dir_, "/py.txt' 2>&1");
  EXPECT_EQ(Shell(py), 0) << ReadFile(dir_ + "/py.txt");
  EXPECT_EQ(ReadFile(dir_ + "/py.txt"), "OK\n");

  s.SendRelease();
  ASSERT_TRUE(s.Await(AcquireEvent::RELEASED));

  // Half a TLS configuration, or an unreadable file, is refused at start.
  ReplicaConfig half = TestConfig(connect_, root_);
  half.tls_cert_file = dir_ + "/server.crt";
  EXPECT_EQ(Replica::Start(half).status().code(), absl::StatusCode::kInvalidArgument);
  ReplicaConfig missing = TestConfig(connect_, root_);
  missing.tls_cert_file = dir_ + "/nope.crt";
  missing.tls_key_file = dir_ + "/server.key";
  EXPECT_FALSE(Replica::Start(missing).ok());
}

TEST_F(SecurityTest, ZooKeeperAuthMakesNodesCreatorOnly) {
  std::ofstream(dir_ + "/alice.auth") << "digest:alice:correct-horse\n";
  std::ofstream(dir_ + "/mallory.auth") << "digest:mallory:guess\n";
  ReplicaConfig cfg = TestConfig(connect_, root_);
  cfg.zk_auth_file = dir_ + "/alice.auth";
  auto r1 = StartReplica(cfg);
  auto r2 = StartReplica(cfg);
  ASSERT_TRUE(r1 && r2);
  auto s1 = NewStub(r1->address());
  auto s2 = NewStub(r2->address());

  // Replicas sharing the credentials share the locks.
  AcquireStream holder(s1.get(), OpenMsg("acl", milliseconds(30000)));
  auto granted = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(granted);
  AcquireStream waiter(s2.get(), OpenMsg("acl", milliseconds(30000)));
  auto q = waiter.Next();
  ASSERT_TRUE(q && q->type() == AcquireEvent::QUEUED);

  // A session without the credentials can neither list nor delete them.
  SyncZk anonymous(connect_);
  const std::string lock_path = root_ + "/" + EncodeLockName("acl");
  auto children = anonymous.Children(lock_path);
  EXPECT_FALSE(children.ok()) << "listing a creator-only lock node must fail";
  // A lease id is "<encoded lock name>/<node name>".
  std::string holder_node = root_ + "/" + granted->acquired().lease_id();
  ASSERT_TRUE(anonymous.Exists(holder_node).ok()) << holder_node;
  EXPECT_EQ(anonymous.Delete(holder_node), ZkCode::kNoAuth);
  EXPECT_EQ(anonymous.Create(lock_path + "/intruder", "", CreateMode::kPersistent), ZkCode::kNoAuth);

  // A replica with other credentials cannot take part; nothing held moves.
  ReplicaConfig other = cfg;
  other.zk_auth_file = dir_ + "/mallory.auth";
  other.max_contenders_per_lock = 2;
  auto r3 = StartReplica(other);
  ASSERT_TRUE(r3);
  auto s3 = NewStub(r3->address());
  // Refused each time, and a refused contender leaves nothing in the
  // replica's tables: repeated refusals never fill the per-lock limit (2
  // here) or the watch budget (issue 11).
  for (int i = 0; i < 3; ++i) {
    AcquireStream intruder(s3.get(), OpenMsg("acl", milliseconds(3000)));
    auto end = intruder.AwaitEnd();
    ASSERT_TRUE(end);
    EXPECT_EQ(end->error_code(), grpc::StatusCode::PERMISSION_DENIED) << i << ": " << end->error_message();
    EXPECT_TRUE(WaitFor([&] { return r3->engine().stats().contenders == 0; }, milliseconds(5000)))
        << "the refused contender stayed in the engine's tables";
  }
  EXPECT_FALSE(holder.Next(milliseconds(0)).has_value());

  holder.SendRelease();
  ASSERT_TRUE(holder.Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(waiter.Await(AcquireEvent::ACQUIRED));
  waiter.SendRelease();
  ASSERT_TRUE(waiter.Await(AcquireEvent::RELEASED));
}

// Issue 19 (5): gRPC's default SO_REUSEPORT let a second replica bind the
// same --listen address and silently take a share of the connections. The
// second one must fail to start, saying the address is in use: in-process
// and as a turnstiled process (its exit status and message).
TEST_F(SecurityTest, ASecondReplicaCannotListenOnTheSamePort) {
  auto r1 = StartReplica(TestConfig(connect_, root_));
  ASSERT_TRUE(r1);
  const std::string taken = absl::StrCat("127.0.0.1:", r1->port());

  ReplicaConfig twin = TestConfig(connect_, root_);
  twin.listen = taken;
  twin.metrics_listen = "";
  auto r2 = Replica::Start(twin, nullptr);
  ASSERT_FALSE(r2.ok()) << "a second replica bound " << taken;
  EXPECT_EQ(r2.status().code(), absl::StatusCode::kUnavailable) << r2.status();
  EXPECT_NE(r2.status().message().find("address already in use"), std::string::npos)
      << r2.status();

  auto p = ChildProcess::Spawn(
      {"/bin/sh", "-c",
       absl::StrCat("exec '", TestBinary("turnstiled"), "' --listen ", taken,
                    " --metrics-listen '' --zk '", connect_, "' --zk-root '", root_, "' 2>&1")});
  ASSERT_TRUE(p);
  std::string out;
  for (int i = 0; i < 20; ++i) {
    auto line = p->ReadLine(milliseconds(20000));
    if (!line) break;
    out += *line + "\n";
  }
  auto rc = p->Wait(milliseconds(20000));
  ASSERT_TRUE(rc) << "the second turnstiled kept running: " << out;
  EXPECT_NE(*rc, 0) << out;
  EXPECT_NE(out.find("address already in use"), std::string::npos) << out;

  // The first replica still serves every connection.
  auto stub = NewStub(r1->address());
  for (int i = 0; i < 5; ++i) {
    AcquireStream s(stub.get(), OpenMsg("reuse", milliseconds(0)));
    ASSERT_TRUE(s.Await(AcquireEvent::ACQUIRED)) << i;
    s.SendRelease();
    ASSERT_TRUE(s.Await(AcquireEvent::RELEASED)) << i;
  }
}

}  // namespace
}  // namespace turnstile::testing
