// Issue 13: mutual TLS identities and per-prefix authorization, through real
// replicas on the shared real ZooKeeper over mTLS. Certificates are made per
// run (tests/test_pki.h); the policy is a file the replica reloads.
#include <gtest/gtest.h>
#include <climits>
#include <random>

#include <fcntl.h>
#include <sys/stat.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/lib/tls.h"
#include "server/rpc/authz.h"
#include "server/rpc/client_cert.h"
#include "server/rpc/cert_names.h"
#include "server/replica.h"
#include "tests/test_pki.h"
#include "tests/bad_input.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

using std::chrono::milliseconds;

constexpr char kApi[] = "spiffe://acme.test/team/payments/api";
constexpr char kBatch[] = "spiffe://acme.test/team/payments/batch";
constexpr char kAdmin[] = "spiffe://acme.test/ops/admin";
constexpr char kIndexer[] = "spiffe://acme.test/team/search/indexer";
constexpr char kRetired[] = "spiffe://acme.test/team/payments/retired";

// Three-plus identities, nested prefixes, every action, an exact rule
// beating a glob, a glob team rule, admin and a deny.
constexpr char kPolicy[] = R"({"rules": [
  {"identities": ["spiffe://acme.test/team/payments/*"], "locks": ["payments/"],
   "actions": ["acquire", "describe", "list", "keepalive"], "description": "payments team"},
  {"identities": ["spiffe://acme.test/team/payments/batch"], "locks": ["payments/batch/"],
   "actions": ["*"], "description": "batch owns its subtree"},
  {"identities": ["spiffe://acme.test/team/*"], "locks": ["payments/ledger/"],
   "actions": ["describe"], "description": "every team may look at the ledger"},
  {"identities": ["spiffe://acme.test/ops/admin"], "locks": [""], "admin": true},
  {"identities": ["spiffe://acme.test/team/payments/retired"], "locks": [""], "deny": true},
  {"identities": ["spiffe://acme.test/team/search/*"], "locks": ["search/"],
   "actions": ["acquire", "describe", "list", "keepalive", "release"]}
]})";

// "observe" is the Observe RPC, decided by the describe action.
constexpr const char* kActions[] = {"acquire", "describe", "list",     "release",
                                    "revoke",  "keepalive", "proclaim", "observe"};
constexpr const char* kNames[] = {"payments/api-lock", "payments/batch/nightly",
                                  "payments/ledger/main", "search/index", "other/x"};

// What the policy above allows, written out by hand (not computed by the
// code under test): identity -> name -> actions.
const std::map<std::string, std::map<std::string, std::set<std::string>>>& Expected() {
  static const auto* m = [] {
    const std::set<std::string> team = {"acquire", "describe", "observe", "list", "keepalive"};
    const std::set<std::string> all(std::begin(kActions), std::end(kActions));
    auto* e = new std::map<std::string, std::map<std::string, std::set<std::string>>>();
    (*e)[kApi] = {{"payments/api-lock", team},
                  {"payments/batch/nightly", team},
                  {"payments/ledger/main", team}};
    (*e)[kBatch] = {{"payments/api-lock", team},
                    {"payments/batch/nightly", all},
                    {"payments/ledger/main", team}};
    for (const char* n : kNames) (*e)[kAdmin][n] = all;
    (*e)[kIndexer] = {{"payments/ledger/main", {"describe", "observe"}},
                      {"search/index",
                       {"acquire", "describe", "observe", "list", "keepalive", "release"}}};
    (*e)[kRetired] = {};
    return e;
  }();
  return *m;
}

// What the openssl command says of a certificate file, e.g. "serial" ->
// "0A", "subject" -> "O=acme,CN=api", "enddate" -> "2027-01-31 12:00:00Z":
// the names an operator would compare a log line with, from a tool that is
// not the code under test.
std::string OpensslSays(const std::string& cert, const std::string& what) {
  const std::string cmd = absl::StrCat("openssl x509 -noout -nameopt RFC2253 -dateopt iso_8601 -",
                                       what, " -in '", cert, "'");
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return "";
  char buf[512];
  std::string out;
  while (std::fgets(buf, sizeof(buf), f) != nullptr) out += buf;
  pclose(f);
  const size_t eq = out.find('=');  // "serial=0A\n"
  if (eq == std::string::npos) return "";
  out = out.substr(eq + 1);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Rewrites `file` in place with `text` (of the file's size) and puts its
// mtime back: a poller that looks at stat cannot tell, only SIGHUP can.
::testing::AssertionResult RewriteKeepingStat(const std::string& file, const std::string& text) {
  struct stat st {};
  if (stat(file.c_str(), &st) != 0) return ::testing::AssertionFailure() << "stat " << file;
  if (static_cast<size_t>(st.st_size) != text.size()) {
    return ::testing::AssertionFailure() << file << ": " << st.st_size << " bytes, not "
                                         << text.size();
  }
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f << text;
  }
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  if (utimensat(AT_FDCWD, file.c_str(), times, 0) != 0) {
    return ::testing::AssertionFailure() << "utimensat " << file;
  }
  return ::testing::AssertionSuccess();
}

class AuthzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    connect_ = SharedZkServer().ConnectString();
    server_ = pki_.IssueServer();
    for (const char* id : {kApi, kBatch, kAdmin, kIndexer, kRetired}) Client(id);
    policy_file_ = pki_.dir() + "/policy.json";
    WritePolicy(kPolicy);
    ReplicaConfig cfg = TestConfig(connect_, UniqueRoot("authz"));
    cfg.tls_cert_file = server_.cert;
    cfg.tls_key_file = server_.key;
    cfg.tls_client_ca_file = pki_.ca_file();
    cfg.authz_file = policy_file_;
    r1_ = StartReplica(cfg);
    ASSERT_TRUE(r1_);
    address_ = absl::StrCat("127.0.0.1:", r1_->port());
  }

  // Written to a temporary file and renamed over the policy, as a
  // Kubernetes ConfigMap update swaps it.
  void WritePolicy(const std::string& text) { ASSERT_TRUE(ReplaceFile(policy_file_, text)); }

  // A client certificate for `identity` (URI SAN; CN = last segment).
  TestPki::Files& Client(const std::string& identity, const std::string& issuer = "ca") {
    auto key = identity + "@" + issuer;
    auto it = certs_.find(key);
    if (it != certs_.end()) return it->second;
    return certs_[key] = pki_.IssueClient(absl::StrCat("client", certs_.size()), identity, issuer);
  }

  std::unique_ptr<v1::LockService::Stub> StubWith(const client::TlsFiles& files,
                                                   const std::string& address) {
    auto creds = client::MakeChannelCredentials(files);
    EXPECT_TRUE(creds.ok()) << creds.status();
    return v1::LockService::NewStub(grpc::CreateChannel(address, *creds));
  }
  std::unique_ptr<v1::LockService::Stub> StubWith(const client::TlsFiles& files) {
    return StubWith(files, address_);
  }
  std::unique_ptr<v1::LockService::Stub> StubAt(const std::string& address,
                                                 const std::string& identity) {
    const auto& f = Client(identity);
    return StubWith({pki_.ca_file(), f.cert, f.key}, address);
  }
  std::unique_ptr<v1::LockService::Stub> StubAs(const std::string& identity) {
    return StubAt(address_, identity);
  }

  // A turnstiled process with mutual TLS and `policy`; its stderr (the
  // audit log) is read with its stdout. Its address, "" if it did not start.
  // `tls`: the certificate, key and client CA files (default: the
  // fixture's server pair and CA).
  std::string SpawnTlsReplica(const std::string& policy, std::unique_ptr<ChildProcess>* p,
                              const std::string& extra_flags = "",
                              const client::TlsFiles& tls = {}) {
    const std::string cert = tls.cert_file.empty() ? server_.cert : tls.cert_file;
    const std::string key = tls.key_file.empty() ? server_.key : tls.key_file;
    const std::string ca = tls.ca_file.empty() ? pki_.ca_file() : tls.ca_file;
    *p = ChildProcess::Spawn(
        {"/bin/sh", "-c",
         absl::StrCat("exec '", TestBinary("turnstiled"), "' --listen 127.0.0.1:0 --log-level error "
                      "--metrics-listen '' --zk '", connect_, "' --zk-root '", UniqueRoot("proc"),
                      "' --tls-cert-file '", cert, "' --tls-key-file '", key,
                      "' --tls-client-ca-file '", ca, "' --authz-file '", policy,
                      "' ", extra_flags, " 2>&1")});
    if (!*p) return "";
    // SERVING (its ZooKeeper session up), not merely listening: before,
    // Acquire answers UNAVAILABLE. Health needs a client certificate only.
    const auto& probe = Client(kAdmin);
    auto creds = client::MakeChannelCredentials({ca, probe.cert, probe.key});
    if (!creds.ok()) {
      ADD_FAILURE() << creds.status();
      return "";
    }
    absl::StatusOr<std::string> address = AwaitReplicaServing(**p, *creds);
    if (!address.ok()) {
      ADD_FAILURE() << address.status();
      return "";
    }
    return *address;
  }

  static v1::AcquireOpen Open(const std::string& name, milliseconds wait = milliseconds(0),
                              const std::string& owner = "") {
    return OpenMsg(name, wait, owner);
  }

  // A hold of `name` by the admin; its lease id.
  struct Hold {
    std::unique_ptr<AcquireStream> stream;
    std::string lease;
    uint64_t token = 0;
  };
  Hold AdminHold(v1::LockService::Stub* admin, const std::string& name) {
    Hold h;
    h.stream = std::make_unique<AcquireStream>(admin, Open(name, milliseconds(10000)));
    auto ev = h.stream->Await(AcquireEvent::ACQUIRED);
    EXPECT_TRUE(ev) << "admin could not hold " << name;
    if (ev) h.lease = ev->acquired().lease_id();
    if (ev) h.token = ev->acquired().fencing_token();
    return h;
  }

  grpc::Status Describe(v1::LockService::Stub* stub, const std::string& name,
                        v1::DescribeResponse* out = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::DescribeRequest req;
    req.set_name(name);
    v1::DescribeResponse resp;
    grpc::Status s = stub->Describe(&ctx, req, &resp);
    if (out) *out = resp;
    return s;
  }

  // Tries `action` on `name` as the stub's identity. OK = it was allowed
  // and done; otherwise the status (PERMISSION_DENIED when refused).
  grpc::Status Try(v1::LockService::Stub* stub, v1::LockService::Stub* admin,
                   const std::string& action, const std::string& name) {
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(10);
    if (action == "acquire") {
      AcquireStream s(stub, Open(name));
      auto ev = s.Next();
      if (ev && ev->type() == AcquireEvent::ACQUIRED) {
        s.SendRelease();
        s.AwaitEnd();
        return grpc::Status::OK;
      }
      auto st = s.AwaitEnd();
      return st ? *st : grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no end");
    }
    if (action == "describe") {
      Hold h = AdminHold(admin, name);  // a lock without contenders is NOT_FOUND
      return Describe(stub, name);
    }
    if (action == "list") {
      // The name exists (an admin holds it); allowed = it is listed.
      Hold h = AdminHold(admin, name);
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline);
      v1::ListRequest req;
      req.set_prefix("");
      req.set_limit(1000);
      v1::ListResponse resp;
      grpc::Status s = stub->List(&ctx, req, &resp);
      if (!s.ok()) return s;
      for (const auto& n : resp.names()) {
        if (n == name) return grpc::Status::OK;
      }
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not listed");
    }
    Hold h = AdminHold(admin, name);
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    if (action == "release") {
      v1::ReleaseRequest req;
      req.set_lease_id(h.lease);
      v1::ReleaseResponse resp;
      return stub->Release(&ctx, req, &resp);
    }
    if (action == "proclaim") {
      v1::ProclaimRequest req;
      req.set_lease_id(h.lease);
      req.set_fencing_token(h.token);
      (*req.mutable_metadata())["value"] = "authz test";
      v1::ProclaimResponse resp;
      return stub->Proclaim(&ctx, req, &resp);
    }
    if (action == "observe") {
      v1::ObserveRequest req;
      req.set_name(name);
      auto reader = stub->Observe(&ctx, req);
      v1::ObserveEvent ev;
      if (reader->Read(&ev)) {
        ctx.TryCancel();
        (void)reader->Finish();
        return grpc::Status::OK;
      }
      return reader->Finish();
    }
    if (action == "revoke") {
      v1::RevokeRequest req;
      req.set_lease_id(h.lease);
      req.set_reason("authz test");
      v1::RevokeResponse resp;
      return stub->Revoke(&ctx, req, &resp);
    }
    // keepalive: the per-lease code.
    auto rw = stub->KeepAlive(&ctx);
    v1::KeepAliveRequest req;
    req.add_lease_ids(h.lease);
    v1::KeepAliveResponse resp;
    if (!rw->Write(req) || !rw->Read(&resp)) {
      rw->WritesDone();
      return rw->Finish();
    }
    rw->WritesDone();
    grpc::Status end = rw->Finish();
    if (!end.ok()) return end;
    if (resp.leases_size() != 1) return grpc::Status(grpc::StatusCode::INTERNAL, "no lease entry");
    return grpc::Status(static_cast<grpc::StatusCode>(resp.leases(0).code()),
                        resp.leases(0).message());
  }

  TestPki pki_;
  TestPki::Files server_;
  std::map<std::string, TestPki::Files> certs_;
  std::string connect_, policy_file_, address_;
  std::unique_ptr<Replica> r1_;
};

// Must show 1: every identity x action x name through the real server; the
// allowed ones succeed, the rest are PERMISSION_DENIED naming who, what and
// which lock.
TEST_F(AuthzTest, EveryIdentityActionAndNameIsDecidedByThePolicy) {
  auto admin = StubAs(kAdmin);
  int tried = 0, unauthorized_successes = 0, authorized_failures = 0;
  for (const auto& [identity, allowed_by_name] : Expected()) {
    auto stub = StubAs(identity);
    for (const char* name : kNames) {
      for (const char* action : kActions) {
        ++tried;
        auto it = allowed_by_name.find(name);
        const bool allowed = it != allowed_by_name.end() && it->second.count(action) > 0;
        grpc::Status s = Try(stub.get(), admin.get(), action, name);
        if (allowed && !s.ok()) {
          ++authorized_failures;
          ADD_FAILURE() << identity << " " << action << " " << name << " should be allowed: "
                        << s.error_code() << " " << s.error_message();
        } else if (!allowed && s.ok()) {
          ++unauthorized_successes;
          ADD_FAILURE() << identity << " " << action << " " << name << " should be refused";
        } else if (!allowed && std::string(action) != "list") {
          EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
              << identity << " " << action << " " << name << ": " << s.error_message();
          EXPECT_NE(s.error_message().find(identity), std::string::npos) << s.error_message();
          // Observe is decided (and refused) as `describe`.
          const std::string named = std::string(action) == "observe" ? "describe" : action;
          EXPECT_NE(s.error_message().find(named), std::string::npos) << s.error_message();
          EXPECT_NE(s.error_message().find(name), std::string::npos) << s.error_message();
        }
      }
    }
  }
  std::printf("authz table: %d calls tried, %d unauthorized successes, %d authorized failures\n",
              tried, unauthorized_successes, authorized_failures);
  RecordProperty("unauthorized_successes", unauthorized_successes);
  EXPECT_EQ(tried, 5 * 5 * 8);
  EXPECT_EQ(unauthorized_successes, 0);
  EXPECT_EQ(authorized_failures, 0);
}

// Must show 2: no certificate, another CA, an expired certificate: each
// UNAUTHENTICATED; an identity the policy denies: PERMISSION_DENIED; and a
// holder of another identity is undisturbed throughout.
TEST_F(AuthzTest, BadCertificatesAreUnauthenticatedAndDeniedIdentitiesRefused) {
  auto api = StubAs(kApi);
  AcquireStream holder(api.get(), Open("payments/held", milliseconds(5000)));
  auto got = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(got);

  pki_.AddCa("other");
  CertSpec expired;
  expired.san = std::string("URI:") + kApi;
  expired.not_before_s = -7200;
  expired.not_after_s = -3600;
  expired.server = false;
  auto old = pki_.Issue("expired", expired);
  struct Case {
    std::string what;
    client::TlsFiles files;
    grpc::StatusCode want;
    std::string says;
  } cases[] = {
      {"no client certificate", {pki_.ca_file(), "", ""}, grpc::StatusCode::UNAUTHENTICATED,
       "no client certificate"},
      {"certificate from another CA",
       {pki_.ca_file(), Client(kApi, "other").cert, Client(kApi, "other").key},
       grpc::StatusCode::UNAUTHENTICATED, "unable to get local issuer certificate"},
      {"expired certificate", {pki_.ca_file(), old.cert, old.key},
       grpc::StatusCode::UNAUTHENTICATED, "certificate has expired"},
      {"identity denied by the policy",
       {pki_.ca_file(), Client(kRetired).cert, Client(kRetired).key},
       grpc::StatusCode::PERMISSION_DENIED, kRetired},
  };
  for (const auto& c : cases) {
    auto stub = StubWith(c.files);
    // Every kind of call, and the holder's lock in particular.
    grpc::Status d = Describe(stub.get(), "payments/held");
    EXPECT_EQ(d.error_code(), c.want) << c.what << ": " << d.error_message();
    EXPECT_NE(d.error_message().find(c.says), std::string::npos) << c.what << ": " << d.error_message();
    AcquireStream a(stub.get(), Open("payments/held"));
    auto end = a.AwaitEnd();
    ASSERT_TRUE(end) << c.what;
    EXPECT_EQ(end->error_code(), c.want) << c.what << ": " << end->error_message();
    grpc::ClientContext ctx;
    v1::ReleaseRequest rel;
    rel.set_lease_id(got->acquired().lease_id());
    v1::ReleaseResponse rr;
    EXPECT_EQ(stub->Release(&ctx, rel, &rr).error_code(), c.want) << c.what;
  }
  // The holder heard nothing and still holds.
  EXPECT_FALSE(holder.Next(milliseconds(200))) << "the holder was disturbed";
  EXPECT_FALSE(holder.ended());
  v1::DescribeResponse desc;
  ASSERT_TRUE(Describe(api.get(), "payments/held", &desc).ok());
  ASSERT_EQ(desc.holders_size(), 1);
  EXPECT_EQ(desc.holders(0).fencing_token(), got->acquired().fencing_token());
  EXPECT_EQ(desc.holders(0).identity(), kApi);
  holder.SendRelease();
  ASSERT_TRUE(holder.AwaitEnd());
}

// Must show 3: a policy rewritten while holds and waits are open applies to
// new calls within a second and drops nothing; an invalid policy leaves the
// old one in force.
TEST_F(AuthzTest, APolicyReloadAppliesToNewCallsAndDisturbsNoHold) {
  auto api = StubAs(kApi);
  auto batch = StubAs(kBatch);
  AcquireStream holder(api.get(), Open("payments/reload", milliseconds(5000)));
  auto held = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(held);
  AcquireStream waiter(batch.get(), Open("payments/reload", milliseconds(30000)));
  ASSERT_TRUE(waiter.Next()) << "the waiter was not queued";
  ASSERT_TRUE(Describe(api.get(), "payments/reload").ok());

  // The api identity loses the payments prefix; batch keeps it.
  std::string narrowed = kPolicy;
  narrowed.replace(narrowed.find("\"spiffe://acme.test/team/payments/*\"]"),
                   std::string("\"spiffe://acme.test/team/payments/*\"]").size(),
                   "\"spiffe://acme.test/team/payments/batch\"]");
  const auto t0 = std::chrono::steady_clock::now();
  WritePolicy(narrowed);
  ASSERT_TRUE(WaitFor([&] {
    return Describe(api.get(), "payments/reload").error_code() ==
           grpc::StatusCode::PERMISSION_DENIED;
  }, milliseconds(1000))) << "the new policy did not apply within a second";
  const auto took = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0);
  std::printf("policy reload took effect after %lld ms\n", static_cast<long long>(took.count()));
  // New calls of the narrowed identity are refused ...
  AcquireStream refused(api.get(), Open("payments/other"));
  auto end = refused.AwaitEnd();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // ... but its open hold and the other identity's wait are untouched.
  EXPECT_FALSE(holder.Next(milliseconds(200)));
  EXPECT_FALSE(holder.ended());
  EXPECT_TRUE(Describe(batch.get(), "payments/reload").ok());

  // An invalid policy (unknown action) is rejected: the narrowed one stays.
  WritePolicy(R"({"rules": [{"identities": ["*"], "locks": [""], "actions": ["own"]}]})");
  EXPECT_FALSE(r1_->ReloadPolicy());
  EXPECT_EQ(Describe(api.get(), "payments/reload").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Describe(batch.get(), "payments/reload").ok());
  WritePolicy("not json at all");
  EXPECT_FALSE(r1_->ReloadPolicy());
  EXPECT_TRUE(Describe(batch.get(), "payments/reload").ok());

  // The hold hands over as usual.
  holder.SendRelease();
  ASSERT_TRUE(holder.AwaitEnd());
  auto next = waiter.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(next);
  EXPECT_GT(next->acquired().fencing_token(), held->acquired().fencing_token());
  waiter.SendRelease();
  ASSERT_TRUE(waiter.AwaitEnd());
}

// Must show 4: owner is a label; the identity is the certificate's.
TEST_F(AuthzTest, AClientThatClaimsAnotherOwnerIsShownWithItsOwnIdentity) {
  auto api = StubAs(kApi);
  AcquireStream s(api.get(), Open("payments/spoof", milliseconds(5000), kAdmin));
  ASSERT_TRUE(s.Await(AcquireEvent::ACQUIRED));
  v1::DescribeResponse desc;
  ASSERT_TRUE(Describe(StubAs(kAdmin).get(), "payments/spoof", &desc).ok());
  ASSERT_EQ(desc.holders_size(), 1);
  EXPECT_EQ(desc.holders(0).owner(), kAdmin);      // what it claimed
  EXPECT_EQ(desc.holders(0).identity(), kApi);     // who it is
  // Nor does claiming admin give admin's rights.
  AcquireStream other(api.get(), Open("other/x", milliseconds(0), kAdmin));
  auto end = other.AwaitEnd();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->error_code(), grpc::StatusCode::PERMISSION_DENIED);
  s.SendRelease();
  ASSERT_TRUE(s.AwaitEnd());
}

// The CLI (flags) and the Python client (arguments) present a client
// certificate and are known by it; without one they are refused.
TEST_F(AuthzTest, CliAndPythonPresentTheirClientCertificates) {
  const auto& api = Client(kApi);
  auto cli = [&](std::vector<std::string> extra) {
    // --output json: errors come on stdout as {"error":CODE,"message":...}.
    std::vector<std::string> argv = {CLI_PATH, "--server", address_, "--rpc-timeout", "10s",
                                     "--output", "json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = ChildProcess::Spawn(argv);
    EXPECT_TRUE(p);
    std::string out = p ? p->ReadSome(milliseconds(15000)) : "";
    auto rc = p ? p->Wait(milliseconds(15000)) : std::nullopt;
    return std::make_pair(rc.value_or(-1), out);
  };
  // Allowed: list under payments/ (exit 0).
  auto ok = cli({"--tls-ca-file", pki_.ca_file(), "--tls-cert-file", api.cert, "--tls-key-file",
                 api.key, "list", "payments/"});
  EXPECT_EQ(ok.first, 0) << ok.second;
  // Refused by the policy: names the identity.
  auto denied = cli({"--tls-ca-file", pki_.ca_file(), "--tls-cert-file", api.cert,
                     "--tls-key-file", api.key, "describe", "other/x"});
  EXPECT_NE(denied.first, 0);
  EXPECT_NE(denied.second.find("PERMISSION_DENIED"), std::string::npos) << denied.second;
  EXPECT_NE(denied.second.find(kApi), std::string::npos) << denied.second;
  // No client certificate.
  auto anon = cli({"--tls-ca-file", pki_.ca_file(), "describe", "payments/x"});
  EXPECT_NE(anon.first, 0);
  EXPECT_NE(anon.second.find("UNAUTHENTICATED"), std::string::npos) << anon.second;

  // Python: explicit tls_* arguments; the hold carries the identity.
  setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
  const std::string script = R"PY(
import sys
from turnstile import Client
c = Client(sys.argv[1], tls_ca_file=sys.argv[2], tls_cert_file=sys.argv[3], tls_key_file=sys.argv[4])
lock = c.acquire("payments/py", wait_timeout=0, owner="someone-else")
print("HELD", flush=True)
import signal
signal.pause()  # holds until the test's SIGTERM ends the process (and the stream)
)PY";
  auto py = ChildProcess::Spawn({"/usr/bin/python3", "-c",
                                 "import sys; sys.path.insert(0, '" PY_PACKAGE_DIR "'); "
                                 "exec(sys.argv.pop(1))",
                                 script, address_, pki_.ca_file(), api.cert, api.key});
  ASSERT_TRUE(py);
  ASSERT_TRUE(py->AwaitLine("HELD", milliseconds(30000)));
  v1::DescribeResponse desc;
  auto admin = StubAs(kAdmin);
  grpc::Status st = Describe(admin.get(), "payments/py", &desc);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  ASSERT_EQ(desc.holders_size(), 1);
  EXPECT_EQ(desc.holders(0).identity(), kApi);
  EXPECT_EQ(desc.holders(0).owner(), "someone-else");
  py->Signal(SIGTERM);
  EXPECT_TRUE(py->Wait(milliseconds(20000)));
}

// Bad input is INVALID_ARGUMENT whoever asks: every RPC checks it before
// the policy, for an identity a deny rule refuses everything and one no rule
// matches (tests/bad_input.h, which validation_test runs without a policy).
// The CLI exits 2 for it, as for any usage error.
TEST_F(AuthzTest, BadInputIsInvalidArgumentBeforeThePolicyIsAsked) {
  for (const char* identity : {kRetired, kIndexer}) {
    auto stub = StubAs(identity);
    for (const BadInputCall& c : BadInputCalls("other/x")) {
      SCOPED_TRACE(absl::StrCat(identity, " ", c.rpc, ": ", c.what));
      grpc::Status st = c.call(stub.get());
      EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    }
    // The same identity with good input is refused by the policy: the
    // table's lock is one it may not touch.
    v1::DescribeResponse desc;
    EXPECT_EQ(Describe(stub.get(), "other/x", &desc).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  const auto& indexer = Client(kIndexer);
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"check", "", "5"}, {"describe", ""}, {"release", "no-slash"}}) {
    // --output json: the error comes on stdout as {"error":CODE,...}.
    std::vector<std::string> argv = {CLI_PATH, "--server", address_, "--rpc-timeout", "10s",
                                     "--output", "json", "--tls-ca-file", pki_.ca_file(), "--tls-cert-file",
                                     indexer.cert, "--tls-key-file", indexer.key};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = ChildProcess::Spawn(argv);
    ASSERT_TRUE(p);
    const std::string out = p->ReadSome(milliseconds(15000));
    auto rc = p->Wait(milliseconds(15000));
    EXPECT_EQ(rc.value_or(-1), 2) << args[0] << ": " << out;
    EXPECT_NE(out.find("INVALID_ARGUMENT"), std::string::npos) << args[0] << ": " << out;
  }
}

// SIGHUP reloads the policy even when the file looks unchanged to the
// poller (rewritten in place, same size, mtime put back): the turnstiled
// process says so, and the new rules apply.
TEST_F(AuthzTest, SighupReloadsThePolicyOfATurnstiledProcess) {
  const std::string file = pki_.dir() + "/sighup-policy.json";
  // Same length: `"list"    ` and `"describe"` are both ten bytes.
  const std::string before = absl::StrCat(R"({"rules": [{"identities": [")", kApi,
                                          R"("], "locks": ["payments/"], "actions": ["list"    ]}]})");
  std::string after = before;
  after.replace(after.find("\"list\"    "), 10, "\"describe\"");
  ASSERT_EQ(before.size(), after.size());
  std::ofstream(file) << before;
  std::unique_ptr<ChildProcess> p;
  const std::string address = SpawnTlsReplica(file, &p);
  ASSERT_FALSE(address.empty());
  auto stub = StubAt(address, kApi);
  auto list = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ListRequest req;
    req.set_prefix("payments/");
    v1::ListResponse resp;
    return stub->List(&ctx, req, &resp).error_code();
  };
  ASSERT_TRUE(WaitFor([&] { return list() == grpc::StatusCode::OK; }, milliseconds(20000)));

  ASSERT_TRUE(RewriteKeepingStat(file, after));
  p->Signal(SIGHUP);
  auto said = p->AwaitLine("turnstiled: SIGHUP", milliseconds(10000));
  ASSERT_TRUE(said);
  EXPECT_NE(said->find("authz policy reloaded"), std::string::npos) << *said;
  EXPECT_EQ(list(), grpc::StatusCode::PERMISSION_DENIED);
  p->Signal(SIGTERM);
  EXPECT_TRUE(p->Wait(milliseconds(20000)));
}

// The audit log (stderr of turnstiled, one JSON line each): a refused call,
// and a release by lease id by someone other than the holder -- not a
// holder releasing its own lease.
TEST_F(AuthzTest, AuditLinesForRefusalsAndReleasesBySomeoneElse) {
  std::unique_ptr<ChildProcess> p;
  const std::string address = SpawnTlsReplica(policy_file_, &p);
  ASSERT_FALSE(address.empty());
  auto batch = StubAt(address, kBatch), admin = StubAt(address, kAdmin),
       retired = StubAt(address, kRetired);
  auto release = [](v1::LockService::Stub* s, const std::string& lease) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ReleaseRequest req;
    req.set_lease_id(lease);
    v1::ReleaseResponse resp;
    return s->Release(&ctx, req, &resp);
  };
  std::optional<AcquireEvent> held;
  ASSERT_TRUE(WaitFor([&] {
    AcquireStream probe(batch.get(), Open("payments/batch/job", milliseconds(2000)));
    held = probe.Await(AcquireEvent::ACQUIRED, milliseconds(3000));
    if (held) EXPECT_TRUE(release(batch.get(), held->acquired().lease_id()).ok());  // its own
    return held.has_value();
  }, milliseconds(20000)));
  // Refused: audited.
  EXPECT_EQ(Describe(retired.get(), "payments/batch/job").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Released by someone else: audited, naming both.
  AcquireStream hold(batch.get(), Open("payments/batch/job", milliseconds(5000)));
  auto got = hold.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(got);
  ASSERT_TRUE(release(admin.get(), got->acquired().lease_id()).ok());

  // The first audit line is the refusal: the holder's own release wrote none.
  auto first = p->AwaitLine("{\"audit\"", milliseconds(10000));
  ASSERT_TRUE(first);
  EXPECT_NE(first->find("\"audit\":\"denied\""), std::string::npos) << *first;
  EXPECT_NE(first->find(absl::StrCat("\"identity\":\"", kRetired, "\"")), std::string::npos) << *first;
  EXPECT_NE(first->find("\"action\":\"describe\""), std::string::npos) << *first;
  EXPECT_NE(first->find("\"lock\":\"payments/batch/job\""), std::string::npos) << *first;
  auto second = p->AwaitLine("{\"audit\"", milliseconds(10000));
  ASSERT_TRUE(second);
  EXPECT_NE(second->find("\"audit\":\"release_by_other\""), std::string::npos) << *second;
  EXPECT_NE(second->find(absl::StrCat("\"identity\":\"", kAdmin, "\"")), std::string::npos) << *second;
  EXPECT_NE(second->find(absl::StrCat("holder ", kBatch)), std::string::npos) << *second;
  p->Signal(SIGTERM);
  EXPECT_TRUE(p->Wait(milliseconds(20000)));
}

// Issue 19 (2): List is decided for its prefix by the rule that wins there.
// A deny rule refuses it, audited, even where a broader allow rule (here
// the payments team's glob) would show names; likewise a deny that ties an
// allow on the same prefix. A partly visible prefix is still filtered.
TEST_F(AuthzTest, ListByADeniedIdentityIsRefusedAndAudited) {
  constexpr char kTied[] = "spiffe://acme.test/team/ties/job";
  std::string policy = kPolicy;
  policy.insert(policy.rfind(']'),
                absl::StrCat(R"(, {"identities": [")", kTied,
                             R"("], "locks": ["payments/"], "actions": ["list"]},)",
                             R"( {"identities": [")", kTied, R"("], "locks": ["payments/"], "deny": true})"));
  const std::string file = pki_.dir() + "/list-policy.json";
  std::ofstream(file) << policy;
  std::unique_ptr<ChildProcess> p;
  const std::string address = SpawnTlsReplica(file, &p);
  ASSERT_FALSE(address.empty());
  auto admin = StubAt(address, kAdmin);
  Hold h1 = AdminHold(admin.get(), "payments/api-lock");
  Hold h2 = AdminHold(admin.get(), "other/x");
  auto list = [](v1::LockService::Stub* s, const std::string& prefix,
                 std::vector<std::string>* names = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ListRequest req;
    req.set_prefix(prefix);
    req.set_limit(1000);
    v1::ListResponse resp;
    grpc::Status st = s->List(&ctx, req, &resp);
    if (names) names->assign(resp.names().begin(), resp.names().end());
    return st;
  };
  struct Case {
    const char* identity;
    std::string prefix;
  };
  const std::vector<Case> refused = {{kRetired, ""},         {kRetired, "payments/"},
                                     {kRetired, "payments/x"}, {kTied, "payments/"},
                                     {kTied, "payments/api"},  {kTied, ""}};
  for (const auto& c : refused) {
    auto stub = StubAt(address, c.identity);
    std::vector<std::string> names;
    grpc::Status st = list(stub.get(), c.prefix, &names);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << c.identity << " prefix \"" << c.prefix << "\": " << st.error_message() << " ("
        << names.size() << " names)";
    EXPECT_NE(st.error_message().find(c.identity), std::string::npos) << st.error_message();
    EXPECT_NE(st.error_message().find("may not list"), std::string::npos) << st.error_message();
    // Its audit line, naming the identity and the prefix.
    auto line = p->AwaitLine("{\"audit\"", milliseconds(10000));
    ASSERT_TRUE(line) << "no audit line for " << c.identity << " prefix \"" << c.prefix << "\"";
    EXPECT_NE(line->find("\"audit\":\"denied\""), std::string::npos) << *line;
    EXPECT_NE(line->find(absl::StrCat("\"identity\":\"", c.identity, "\"")), std::string::npos)
        << *line;
    EXPECT_NE(line->find("\"action\":\"list\""), std::string::npos) << *line;
    EXPECT_NE(line->find(absl::StrCat("\"lock\":\"", c.prefix, "\"")), std::string::npos) << *line;
  }
  // A partly visible prefix: the api job sees payments names only.
  auto api = StubAt(address, kApi);
  std::vector<std::string> names;
  ASSERT_TRUE(list(api.get(), "", &names).ok());
  EXPECT_EQ(names, std::vector<std::string>{"payments/api-lock"});
  ASSERT_TRUE(list(api.get(), "payments/", &names).ok());
  EXPECT_EQ(names, std::vector<std::string>{"payments/api-lock"});
  // A prefix nothing allows at all: refused as before.
  EXPECT_EQ(list(api.get(), "other/").error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Issue 24: more hidden names than visible ones, hidden ones first in
  // byte order: the limit counts visible names only, and truncated says
  // whether more visible names exist.
  std::vector<Hold> more;
  for (const char* n : {"payments/a0", "payments/a1", "payments/a2", "payments/a3",
                        "payments/batch/b0", "payments/batch/b1", "payments/batch/b2"}) {
    more.push_back(AdminHold(admin.get(), n));
  }
  auto limited = [&](v1::LockService::Stub* s, const std::string& prefix, int limit,
                     std::vector<std::string>* names, bool* truncated) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ListRequest req;
    req.set_prefix(prefix);
    req.set_limit(limit);
    v1::ListResponse resp;
    grpc::Status st = s->List(&ctx, req, &resp);
    names->assign(resp.names().begin(), resp.names().end());
    *truncated = resp.truncated();
    return st;
  };
  // The indexer may list search/ only: under "" it sees 2 names after 9
  // hidden ones (other/x, payments/...) in byte order.
  Hold s1 = AdminHold(admin.get(), "search/index");
  Hold s2 = AdminHold(admin.get(), "search/shard");
  auto indexer = StubAt(address, kIndexer);
  std::vector<std::string> got;
  bool truncated = false;
  ASSERT_TRUE(limited(indexer.get(), "", 1, &got, &truncated).ok());
  EXPECT_EQ(got, (std::vector<std::string>{"search/index"}));
  EXPECT_TRUE(truncated) << "a second visible name exists";
  ASSERT_TRUE(limited(indexer.get(), "", 2, &got, &truncated).ok());
  EXPECT_EQ(got, (std::vector<std::string>{"search/index", "search/shard"}));
  EXPECT_FALSE(truncated) << "no more visible names exist";
  h1.stream.reset();  // no holds left to drain
  h2.stream.reset();
  p->Signal(SIGTERM);
  EXPECT_TRUE(p->Wait(milliseconds(20000)));
}

// Issue 19 (4): a policy file given by mistake (here a ZooKeeper digest
// file) must not be echoed: the start-up error and the reload log line name
// the file, where the error is, and what it is -- never the file's bytes.
TEST_F(AuthzTest, PolicyErrorsNameTheFileAndPlaceButNeverItsContents) {
  constexpr char kSecret[] = "S3cretPassw0rd";
  // Syntax errors: the offset, line and column, no byte of the input.
  struct {
    std::string text, where;
  } syntax[] = {
      {absl::StrCat("digest:turnstile:", kSecret), "byte offset 0 (line 1, column 1)"},
      {absl::StrCat("{\"rules\": [\n  {\"identities\": [\"a\"],\n   ", kSecret, "}]}"),
       "(line 3, column 18)"},  // the bare word ends where ':' was expected
  };
  for (const auto& c : syntax) {
    auto parsed = AuthzPolicy::Parse(c.text);
    ASSERT_FALSE(parsed.ok());
    const std::string m(parsed.status().message());
    EXPECT_EQ(m.find(kSecret), std::string::npos) << m;
    EXPECT_EQ(m.find("digest"), std::string::npos) << m;
    EXPECT_NE(m.find("syntax error"), std::string::npos) << m;
    EXPECT_NE(m.find(c.where), std::string::npos) << m;
  }
  // Field and value errors: the path, never the name or value.
  for (const std::string& text : {
           absl::StrCat(R"({"rules": [{"identities": ["a"], ")", kSecret, R"(": 1}]})"),
           absl::StrCat(R"({")", kSecret, R"(": []})"),
           absl::StrCat(R"({"rules": [{"identities": ["a"], "locks": [""], "deny": ")", kSecret, R"("}]})"),
           absl::StrCat(R"({"rules": [{"identities": ["a"], "locks": [""], "actions": [")", kSecret, R"("]}]})"),
           absl::StrCat(R"({"rules": [{"identities": ["a"], "locks": [""], "description": ")", kSecret, R"("}]})"),
       }) {
    auto parsed = AuthzPolicy::Parse(text);
    ASSERT_FALSE(parsed.ok()) << text;
    const std::string m(parsed.status().message());
    EXPECT_EQ(m.find(kSecret), std::string::npos) << m;
    EXPECT_TRUE(absl::StrContains(m, "rules[0]") || absl::StrContains(m, "rule 1") ||
                absl::StrContains(m, "top level"))
        << m;
  }

  // A turnstiled process refuses to start on it, naming the file.
  const std::string digest = pki_.dir() + "/zk.digest";
  std::ofstream(digest) << "digest:turnstile:" << kSecret << "\n";
  auto start = ChildProcess::Spawn(
      {"/bin/sh", "-c",
       absl::StrCat("exec '", TestBinary("turnstiled"), "' --listen 127.0.0.1:0 --metrics-listen '' --zk '",
                    connect_, "' --zk-root '", UniqueRoot("proc"), "' --tls-cert-file '", server_.cert,
                    "' --tls-key-file '", server_.key, "' --tls-client-ca-file '", pki_.ca_file(),
                    "' --authz-file '", digest, "' 2>&1")});
  ASSERT_TRUE(start);
  std::string out;
  while (auto line = start->ReadLine(milliseconds(20000))) out += *line + "\n";
  auto rc = start->Wait(milliseconds(20000));
  ASSERT_TRUE(rc);
  EXPECT_NE(*rc, 0) << out;
  EXPECT_EQ(out.find(kSecret), std::string::npos) << out;
  EXPECT_NE(out.find(digest), std::string::npos) << out;
  EXPECT_NE(out.find("byte offset 0"), std::string::npos) << out;

  // The reload log line of a running replica, likewise.
  const std::string policy = pki_.dir() + "/reload-policy.json";
  std::ofstream(policy) << kPolicy;
  std::unique_ptr<ChildProcess> p;
  ASSERT_FALSE(SpawnTlsReplica(policy, &p).empty());
  {
    std::ofstream(policy + ".new") << "digest:turnstile:" << kSecret << "\n";
    ASSERT_EQ(std::rename((policy + ".new").c_str(), policy.c_str()), 0);
  }
  auto line = p->AwaitLine("turnstiled: authz policy", milliseconds(10000));
  ASSERT_TRUE(line);
  EXPECT_NE(line->find("rejected"), std::string::npos) << *line;
  EXPECT_NE(line->find(policy), std::string::npos) << *line;
  EXPECT_NE(line->find("byte offset 0"), std::string::npos) << *line;
  EXPECT_EQ(line->find(kSecret), std::string::npos) << *line;
  p->Signal(SIGTERM);
  EXPECT_TRUE(p->Wait(milliseconds(20000)));
}

// Issue 19 (6): a stolen client certificate is cut off by a CRL
// (--tls-client-crl-file), not by a deny on its identity: the revoked
// certificate gets UNAUTHENTICATED naming the reason, with its audit line,
// while a certificate re-issued to the same identity works. The file is
// reloaded when it changes (renamed over) and on SIGHUP (rewritten in place
// with size and mtime kept, so only the signal can tell); an invalid CRL
// leaves the previous one in force.
TEST_F(AuthzTest, RevokedClientCertificatesAreRefusedAndTheCrlReloads) {
  const std::string crl = pki_.dir() + "/clients.crl";
  pki_.WriteCrl(crl, {});
  const std::string policy = pki_.dir() + "/crl-policy.json";
  std::ofstream(policy) << kPolicy;
  std::unique_ptr<ChildProcess> p;
  const std::string address =
      SpawnTlsReplica(policy, &p, absl::StrCat("--tls-client-crl-file '", crl, "'"));
  ASSERT_FALSE(address.empty());
  auto api = StubAt(address, kApi), batch = StubAt(address, kBatch);
  // An authorized Describe of a lock nobody holds: NOT_FOUND.
  auto code = [&](v1::LockService::Stub* s, std::string* message = nullptr) {
    v1::DescribeResponse resp;
    grpc::Status st = Describe(s, "payments/api-lock", &resp);
    if (message) *message = st.error_message();
    return st.error_code();
  };
  ASSERT_EQ(code(api.get()), grpc::StatusCode::NOT_FOUND);
  ASSERT_EQ(code(batch.get()), grpc::StatusCode::NOT_FOUND);

  // Revoke the api job's certificate (the new CRL renamed over the old).
  const std::string revoke_api = crl + ".api", revoke_batch = crl + ".batch";
  pki_.WriteCrl(revoke_api, {Client(kApi).cert});
  pki_.WriteCrl(revoke_batch, {Client(kBatch).cert});
  ASSERT_EQ(std::system(absl::StrCat("cp '", revoke_api, "' '", crl, ".new' && mv '", crl,
                                     ".new' '", crl, "'").c_str()), 0);
  ASSERT_TRUE(WaitFor([&] { return code(api.get()) == grpc::StatusCode::UNAUTHENTICATED; },
                      milliseconds(10000)))
      << "the changed CRL was not applied";
  std::string message;
  EXPECT_EQ(code(api.get(), &message), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(message.find("certificate revoked"), std::string::npos) << message;
  {
    AcquireStream s(api.get(), Open("payments/api-lock", milliseconds(1000)));
    auto end = s.AwaitEnd();
    ASSERT_TRUE(end);
    EXPECT_EQ(end->error_code(), grpc::StatusCode::UNAUTHENTICATED) << end->error_message();
  }
  EXPECT_EQ(code(batch.get()), grpc::StatusCode::NOT_FOUND);  // others are untouched
  // The same identity with a re-issued certificate: allowed.
  CertSpec spec;
  spec.cn = "api";
  spec.san = absl::StrCat("URI:", kApi);
  spec.server = false;
  auto reissued = pki_.Issue("api-reissued", spec);
  auto api2 = StubWith({pki_.ca_file(), reissued.cert, reissued.key}, address);
  EXPECT_EQ(code(api2.get()), grpc::StatusCode::NOT_FOUND);
  // The refusal's audit line.
  std::optional<std::string> line;
  while ((line = p->AwaitLine("{\"audit\"", milliseconds(10000)))) {
    if (line->find("revoked") != std::string::npos) break;
  }
  ASSERT_TRUE(line) << "no audit line for the revoked certificate";
  EXPECT_NE(line->find("\"audit\":\"unauthenticated\""), std::string::npos) << *line;
  EXPECT_NE(line->find("certificate revoked"), std::string::npos) << *line;
  // Which certificate keeps being refused: its subject and serial (as
  // openssl prints them), and the identity it claims, apart from the
  // verified identity (none).
  const std::string serial = OpensslSays(Client(kApi).cert, "serial");
  const std::string subject = OpensslSays(Client(kApi).cert, "subject");
  ASSERT_FALSE(serial.empty());
  ASSERT_TRUE(absl::EndsWith(subject, "CN=api")) << subject;
  EXPECT_NE(line->find("\"identity\":\"\""), std::string::npos) << *line;
  EXPECT_NE(line->find(absl::StrCat("\"cert_serial\":\"", serial, "\"")), std::string::npos)
      << *line;
  EXPECT_NE(line->find(absl::StrCat("\"cert_subject\":\"", subject, "\"")), std::string::npos)
      << *line;
  EXPECT_NE(line->find(absl::StrCat("\"cert_identity\":\"", kApi, "\"")), std::string::npos)
      << *line;
  EXPECT_NE(line->find(absl::StrCat("subject \\\"", subject, "\\\", serial ", serial)),
            std::string::npos)
      << *line;  // the detail, for people

  // SIGHUP: the file rewritten in place to revoke the batch job instead,
  // padded to the same size (PEM allows trailing text), mtime put back.
  std::string a = ReadFile(revoke_api), b = ReadFile(revoke_batch);
  const size_t size = std::max(a.size(), b.size());
  a.resize(size, '\n');
  b.resize(size, '\n');
  std::ofstream(crl + ".new") << a;
  ASSERT_EQ(std::rename((crl + ".new").c_str(), crl.c_str()), 0);  // padding only: same CRL
  ASSERT_TRUE(WaitFor([&] { return code(api.get()) == grpc::StatusCode::UNAUTHENTICATED; },
                      milliseconds(10000)));
  ASSERT_TRUE(RewriteKeepingStat(crl, b));
  p->Signal(SIGHUP);
  auto said = p->AwaitLine("turnstiled: SIGHUP", milliseconds(10000));
  ASSERT_TRUE(said);
  EXPECT_NE(said->find("client CRL reloaded"), std::string::npos) << *said;
  EXPECT_EQ(code(api.get()), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(code(batch.get()), grpc::StatusCode::UNAUTHENTICATED);

  // An invalid CRL is logged and ignored: the batch job stays revoked.
  ASSERT_EQ(std::system(absl::StrCat("printf 'not a CRL\\n' > '", crl, ".new' && mv '", crl,
                                     ".new' '", crl, "'").c_str()), 0);
  auto rejected = p->AwaitLine("turnstiled: client CRL", milliseconds(10000));
  ASSERT_TRUE(rejected);
  EXPECT_NE(rejected->find("rejected"), std::string::npos) << *rejected;
  EXPECT_EQ(rejected->find("not a CRL"), std::string::npos) << *rejected;  // no file contents
  EXPECT_EQ(code(batch.get()), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(code(api.get()), grpc::StatusCode::NOT_FOUND);
  p->Signal(SIGTERM);
  EXPECT_TRUE(p->Wait(milliseconds(20000)));
}

// The CRL rules on their own: a CRL past its next update still revokes
// what it lists (only its age is forgiven, as etcd does); a certificate
// from a CA with no CRL in the file is refused (fail closed); a CRL not
// signed by a client CA, or a file with no CRL, is refused at start-up.
TEST(ClientCrl, ExpiredCrlsStillRevokeAndEveryIssuerNeedsOne) {
  TestPki pki;
  pki.AddCa("other");
  CertSpec spec;
  spec.san = "URI:spiffe://x/revoked";
  auto revoked = pki.Issue("revoked", spec);
  spec.san = "URI:spiffe://x/fine";
  auto fine = pki.Issue("fine", spec);
  spec.issuer = "other";
  spec.san = "URI:spiffe://x/other";
  auto other = pki.Issue("other-leaf", spec);
  const std::string crl = pki.dir() + "/old.crl";
  pki.WriteCrl(crl, {revoked.cert}, "ca", -60);  // past its next update
  const std::string both_cas = ReadFile(pki.ca_file()) + ReadFile(pki.ca_file("other"));
  auto v = ClientCertVerifier::Create(both_cas, crl);
  ASSERT_TRUE(v.ok()) << v.status();
  auto r = (*v)->IdentifyPem(ReadFile(revoked.cert), "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("certificate revoked"), std::string::npos) << r.status();
  auto f = (*v)->IdentifyPem(ReadFile(fine.cert), "");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*f, "spiffe://x/fine");
  auto o = (*v)->IdentifyPem(ReadFile(other.cert), "");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("no CRL of the certificate's issuer"), std::string::npos)
      << o.status();

  // Only the "ca" CA trusted: a CRL by "other" is not accepted.
  const std::string foreign = pki.dir() + "/foreign.crl";
  pki.WriteCrl(foreign, {}, "other");
  auto bad = ClientCertVerifier::Create(ReadFile(pki.ca_file()), foreign);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not signed by a CA"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find(foreign), std::string::npos) << bad.status();
  const std::string empty = pki.dir() + "/empty.crl";
  std::ofstream(empty) << "digest:user:S3cret\n";
  bad = ClientCertVerifier::Create(ReadFile(pki.ca_file()), empty);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("holds no PEM CRL"), std::string::npos) << bad.status();
  EXPECT_EQ(bad.status().message().find("S3cret"), std::string::npos) << bad.status();
}

// Issue 24 must-show 1: the server certificate and the client CA are
// rotated under a live hold and a live waiter, without a restart. New
// connections see the new certificate and the new client CA (old and new
// CA together during the cross-signed window, then the new one alone); the
// hold keeps its token and the waiter is granted; a mismatched key and
// certificate leave the old pair in force; the expiry metric follows.
// A refused client certificate (expired, from an unknown CA) is named by
// its subject, serial, issuer and expiry (UTC) in the refusal, and carries
// them for the audit line's fields; the names are what openssl prints.
TEST(RefusedCertificate, IsNamedBySubjectSerialIssuerAndExpiryInUtc) {
  EXPECT_EQ(UtcTime(1800000000), "2027-01-15T08:00:00Z");
  EXPECT_EQ(UtcTime(0), "1970-01-01T00:00:00Z");
  TestPki pki;
  pki.AddCa("stranger");
  CertSpec spec;
  spec.cn = "expired-job";
  spec.san = "URI:spiffe://x/expired";
  spec.not_after_s = -60;
  auto expired = pki.Issue("expired", spec);
  spec.cn = "stray";
  spec.san = "DNS:stray.example";
  spec.not_after_s = 86400;
  spec.issuer = "stranger";
  auto stray = pki.Issue("stray", spec);
  auto v = ClientCertVerifier::Create(ReadFile(pki.ca_file()));
  ASSERT_TRUE(v.ok()) << v.status();
  for (const auto& [file, why, identity] :
       {std::tuple{expired.cert, "certificate has expired", "spiffe://x/expired"},
        std::tuple{stray.cert, "unable to get local issuer certificate", "stray.example"}}) {
    SCOPED_TRACE(file);
    auto r = (*v)->IdentifyPem(ReadFile(file), "");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated);
    const std::string message(r.status().message());
    EXPECT_NE(message.find(why), std::string::npos) << message;
    std::string until = OpensslSays(file, "enddate");
    ASSERT_EQ(until.size(), 20u) << until;
    until[10] = 'T';
    const std::string serial = OpensslSays(file, "serial");
    EXPECT_NE(message.find(absl::StrCat("; the certificate: subject \"", OpensslSays(file, "subject"),
                                        "\", serial ", serial, ", issuer \"",
                                        OpensslSays(file, "issuer"), "\", valid until ", until)),
              std::string::npos)
        << message;
    std::optional<CertNames> n = RefusedCertificateOf(r.status());
    ASSERT_TRUE(n);
    EXPECT_EQ(n->identity, identity);
    EXPECT_EQ(n->serial, serial);
    EXPECT_EQ(n->subject, OpensslSays(file, "subject"));
    EXPECT_EQ(UtcTime(n->not_after), until);
    auto fields = RefusedCertificateAuditFields(r.status());
    ASSERT_EQ(fields.size(), 5u);
    EXPECT_EQ(fields[2], std::make_pair(std::string("cert_serial"), serial));
  }
  // A refusal of no certificate carries no names.
  EXPECT_FALSE(RefusedCertificateOf(absl::UnauthenticatedError("no TLS connection")));
  EXPECT_TRUE(RefusedCertificateAuditFields(absl::UnauthenticatedError("x")).empty());
}

TEST_F(AuthzTest, CertificatesRotateWithoutARestartOrADisturbedHold) {
  const std::string dir = pki_.dir() + "/live";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  const std::string cert = dir + "/tls.crt", key = dir + "/tls.key", ca = dir + "/ca.crt";
  // Replaced the way a Secret update does: the new file renamed over.
  auto put = [](const std::string& from, const std::string& to) {
    std::ifstream in(from);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(to + ".tmp") << text;
    ASSERT_EQ(std::rename((to + ".tmp").c_str(), to.c_str()), 0);
  };
  auto bundle = [&](const std::vector<std::string>& files) {
    std::string text;
    for (const auto& f : files) {
      std::ifstream in(f);
      text += std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    std::ofstream(ca + ".tmp") << text;
    ASSERT_EQ(std::rename((ca + ".tmp").c_str(), ca.c_str()), 0);
  };
  put(server_.cert, cert);
  put(server_.key, key);
  bundle({pki_.ca_file()});
  ReplicaConfig cfg = TestConfig(connect_, UniqueRoot("rotate"));
  cfg.tls_cert_file = cert;
  cfg.tls_key_file = key;
  cfg.tls_client_ca_file = ca;
  cfg.authz_file = policy_file_;
  cfg.metrics_listen = "127.0.0.1:0";
  auto r = StartReplica(cfg);
  ASSERT_TRUE(r);
  auto expiry = [&]() -> int64_t {
    auto got = HttpGet(r->metrics_port(), "/metrics");
    if (!got.ok()) return -1;
    // The sample's line (not its # HELP line).
    const std::string name = "\nturnstile_tls_certificate_expiry_timestamp_seconds ";
    const size_t at = got->body.find(name);
    if (at == std::string::npos) return -1;
    return static_cast<int64_t>(std::strtod(got->body.c_str() + at + name.size(), nullptr));
  };
  const int64_t old_expiry = expiry();
  EXPECT_GT(old_expiry, 0);

  // A hold and a waiter through the old certificate, by an old client.
  auto old_admin = StubAt(r->address(), kAdmin);
  AcquireStream holder(old_admin.get(), Open("rot/lock", milliseconds(60000)));
  auto held = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(held);
  AcquireStream waiter(old_admin.get(), Open("rot/lock", milliseconds(60000)));
  ASSERT_TRUE(waiter.Await(AcquireEvent::QUEUED));

  // The new CA issues the new server certificate (valid longer) and new
  // client certificates.
  const std::string ca2 = pki_.AddCa("ca2");
  CertSpec server2;
  server2.cn = "replica";
  server2.san = "DNS:localhost,IP:127.0.0.1";
  server2.issuer = "ca2";
  server2.not_after_s = 30 * 86400;
  const auto s2 = pki_.Issue("server2", server2);
  const auto& admin2 = Client(kAdmin, "ca2");
  // A client that trusts only the new CA, with a new client certificate.
  auto new_client = [&] { return StubWith({ca2, admin2.cert, admin2.key}, r->address()); };
  auto describe_ok = [&](v1::LockService::Stub* stub) {
    v1::DescribeResponse d;
    return Describe(stub, "rot/lock", &d).ok();
  };
  EXPECT_FALSE(describe_ok(new_client().get())) << "the new CA is trusted before the rotation";

  // Cross-signed window: the client CA bundle holds both CAs; then the
  // server pair is renewed (certificate first, key a moment later, as two
  // renames: the half-written pair is refused, the whole one taken).
  bundle({pki_.ca_file(), ca2});
  put(s2.cert, cert);
  put(s2.key, key);
  ASSERT_TRUE(WaitFor([&] { return describe_ok(new_client().get()); }, milliseconds(20000)))
      << "new connections do not see the new certificate and CA";
  EXPECT_TRUE(WaitFor([&] { return expiry() > old_expiry + 20 * 86400; }, milliseconds(10000)))
      << "the expiry metric did not follow the new certificate";
  // An old client certificate (from the old CA) still works during the
  // window, from a client that trusts the new server certificate.
  EXPECT_TRUE(describe_ok(
      StubWith({ca2, Client(kAdmin).cert, Client(kAdmin).key}, r->address()).get()))
      << "old client certificates are refused during the cross-signed window";
  // A client that trusts only the old CA does not accept the new server
  // certificate: the new pair is what new connections get.
  EXPECT_FALSE(describe_ok(
      StubWith({pki_.ca_file(), Client(kAdmin).cert, Client(kAdmin).key}, r->address()).get()));

  // The hold is undisturbed: same stream, no event; it hands over to the
  // waiter, whose stream is also the one opened before the rotation.
  EXPECT_FALSE(holder.Next(milliseconds(0)));
  holder.SendRelease();
  ASSERT_TRUE(holder.Await(AcquireEvent::RELEASED));
  auto granted = waiter.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(granted);
  EXPECT_GT(granted->acquired().fencing_token(), held->acquired().fencing_token());

  // A mismatched pair (ca3's certificate, the current key) is refused and
  // the current pair stays in force.
  pki_.AddCa("ca3");
  CertSpec server3 = server2;
  server3.issuer = "ca3";
  const auto s3 = pki_.Issue("server3", server3);
  put(s3.cert, cert);
  EXPECT_FALSE(r->ReloadTls()) << "a mismatched pair was put in force";
  EXPECT_TRUE(describe_ok(new_client().get())) << "the current pair was dropped";
  EXPECT_FALSE(describe_ok(StubWith({pki_.ca_file("ca3"), admin2.cert, admin2.key},
                                    r->address()).get()));

  // The window ends: the new CA alone. New calls with old client
  // certificates are refused (UNAUTHENTICATED); the waiter's hold, opened
  // with an old certificate, is not disturbed.
  put(s2.cert, cert);
  bundle({ca2});
  ASSERT_TRUE(WaitFor([&] {
    v1::DescribeResponse d;
    return Describe(StubWith({ca2, Client(kAdmin).cert, Client(kAdmin).key}, r->address()).get(),
                    "rot/lock", &d)
               .error_code() == grpc::StatusCode::UNAUTHENTICATED;
  }, milliseconds(20000))) << "old client certificates still accepted after the window";
  EXPECT_TRUE(describe_ok(new_client().get()));
  EXPECT_FALSE(waiter.Next(milliseconds(0)));
  waiter.SendRelease();
  EXPECT_TRUE(waiter.Await(AcquireEvent::RELEASED));
}

// Issue 24: the TLS files as a Kubernetes Secret volume lays them out
// (tls.crt -> ..data/tls.crt, ..data -> a timestamped directory): a renewal
// swaps the ..data symlink, and the files the replica was given never
// change themselves. A turnstiled process picks the swap up by itself;
// a pair rewritten in place with its size and mtime kept is picked up
// only on SIGHUP, which says so.
TEST_F(AuthzTest, CertificatesReloadThroughASecretSymlinkSwapAndOnSighup) {
  const std::string secret = pki_.dir() + "/secret";
  ASSERT_EQ(mkdir(secret.c_str(), 0700), 0);
  constexpr size_t kPadded = 8192;  // PEM allows text after the block
  auto padded = [&](const std::string& file) {
    std::string text = ReadFile(file);
    EXPECT_LT(text.size(), kPadded);
    text.resize(kPadded, '\n');
    return text;
  };
  // One version of the Secret: a directory with the three files.
  auto version = [&](const std::string& name, const TestPki::Files& pair,
                     const std::vector<std::string>& cas) {
    const std::string dir = secret + "/" + name;
    EXPECT_EQ(mkdir(dir.c_str(), 0700), 0);
    std::ofstream(dir + "/tls.crt") << padded(pair.cert);
    std::ofstream(dir + "/tls.key") << padded(pair.key);
    std::string bundle;
    for (const auto& ca : cas) bundle += ReadFile(ca);
    std::ofstream(dir + "/ca.crt") << bundle;
  };
  // What the kubelet does: a new symlink renamed over ..data.
  auto point_data_at = [&](const std::string& name) {
    const std::string tmp = secret + "/..data_tmp";
    ASSERT_EQ(symlink(name.c_str(), tmp.c_str()), 0);
    ASSERT_EQ(std::rename(tmp.c_str(), (secret + "/..data").c_str()), 0);
  };
  version("..2026_11_01", server_, {pki_.ca_file()});
  point_data_at("..2026_11_01");
  for (const char* f : {"tls.crt", "tls.key", "ca.crt"}) {
    ASSERT_EQ(symlink((std::string("..data/") + f).c_str(), (secret + "/" + f).c_str()), 0);
  }
  std::unique_ptr<ChildProcess> p;
  const std::string address = SpawnTlsReplica(
      policy_file_, &p, "", {secret + "/ca.crt", secret + "/tls.crt", secret + "/tls.key"});
  ASSERT_FALSE(address.empty());
  auto describe_ok = [&](const client::TlsFiles& files) {
    v1::DescribeResponse d;
    return Describe(StubWith(files, address).get(), "rot/secret", &d).error_code() ==
           grpc::StatusCode::NOT_FOUND;  // authorized; nobody holds it
  };
  const auto& admin = Client(kAdmin);
  ASSERT_TRUE(describe_ok({pki_.ca_file(), admin.cert, admin.key}));
  AcquireStream holder(StubAt(address, kAdmin).get(), Open("rot/held", milliseconds(10000)));
  auto held = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(held);

  // The renewal: a new CA's server certificate, both CAs trusted.
  const std::string ca2 = pki_.AddCa("ca2");
  CertSpec spec;
  spec.cn = "replica";
  spec.san = "DNS:localhost,IP:127.0.0.1";
  spec.issuer = "ca2";
  const auto s2 = pki_.Issue("server2", spec);
  const auto& admin2 = Client(kAdmin, "ca2");
  const client::TlsFiles trusts_ca2 = {ca2, admin2.cert, admin2.key};
  EXPECT_FALSE(describe_ok(trusts_ca2)) << "the new pair is in force before the swap";
  version("..2026_11_02", s2, {pki_.ca_file(), ca2});
  point_data_at("..2026_11_02");
  ASSERT_TRUE(WaitFor([&] { return describe_ok(trusts_ca2); }, milliseconds(20000)))
      << "the symlink swap was not picked up";
  // The reload lines give expiry dates in UTC: the new certificate's, and
  // that of the CA of the new bundle that expires first (the old one).
  auto utc = [](const std::string& file) {
    std::string until = OpensslSays(file, "enddate");  // "2026-11-28 20:52:36Z"
    EXPECT_EQ(until.size(), 20u) << until;
    if (until.size() == 20) until[10] = 'T';
    return until;
  };
  std::optional<std::string> cert_line, ca_line;
  for (int i = 0; i < 20 && (!cert_line || !ca_line); ++i) {
    auto line = p->AwaitLine("turnstiled: ", milliseconds(10000));
    if (!line) break;
    if (absl::StartsWith(*line, "turnstiled: TLS certificate") &&
        absl::StrContains(*line, "reloaded")) {
      cert_line = line;
    }
    if (absl::StartsWith(*line, "turnstiled: client CA") && absl::StrContains(*line, "loaded")) {
      ca_line = line;
    }
  }
  ASSERT_TRUE(cert_line) << "no reload line of the certificate";
  EXPECT_EQ(*cert_line, absl::StrCat("turnstiled: TLS certificate ", secret,
                                     "/tls.crt reloaded (valid until ", utc(s2.cert), ")"));
  ASSERT_TRUE(ca_line) << "no reload line of the client CA";
  EXPECT_EQ(*ca_line, absl::StrCat("turnstiled: client CA ", secret,
                                   "/ca.crt loaded (2 certificates; the first to expire: \"",
                                   OpensslSays(pki_.ca_file(), "subject"), "\", valid until ",
                                   utc(pki_.ca_file()), ")"));
  EXPECT_FALSE(describe_ok({pki_.ca_file(), admin.cert, admin.key}))
      << "new connections still get the old certificate";

  // In place, size and mtime kept: the poller cannot tell; SIGHUP can.
  pki_.AddCa("ca3");
  spec.issuer = "ca3";
  const auto s3 = pki_.Issue("server3", spec);
  const client::TlsFiles trusts_ca3 = {pki_.ca_file("ca3"), admin2.cert, admin2.key};
  const std::string dir2 = secret + "/..2026_11_02";
  for (const auto& [file, from] : {std::pair{dir2 + "/tls.crt", s3.cert},
                                   std::pair{dir2 + "/tls.key", s3.key}}) {
    ASSERT_TRUE(RewriteKeepingStat(file, padded(from)));
  }
  p->Signal(SIGHUP);
  auto said = p->AwaitLine("turnstiled: SIGHUP", milliseconds(10000));
  ASSERT_TRUE(said);
  EXPECT_NE(said->find("TLS certificate or client CA reloaded"), std::string::npos) << *said;
  EXPECT_TRUE(WaitFor([&] { return describe_ok(trusts_ca3); }, milliseconds(20000)))
      << "the pair reloaded on SIGHUP is not what new connections get";

  // The hold made before both reloads is untouched and releases normally.
  EXPECT_FALSE(holder.Next(milliseconds(0)));
  holder.SendRelease();
  EXPECT_TRUE(holder.Await(AcquireEvent::RELEASED));
  p->Signal(SIGTERM);
  EXPECT_TRUE(p->Wait(milliseconds(20000)));
}

// Issue 19 (3): /metrics has no client authentication, so with a policy in
// force it shows no lock name by default: every lock is summed under
// lock="_hidden". --metrics-lock-prefixes names the prefixes it may show.
TEST_F(AuthzTest, MetricsShowNoLockNamesUnderAPolicyByDefault) {
  auto admin = StubAs(kAdmin);
  Hold h1 = AdminHold(admin.get(), "payments/api-lock");
  Hold h2 = AdminHold(admin.get(), "search/index");
  auto scrape = [&](const std::string& prefixes) {
    ReplicaConfig cfg = TestConfig(connect_, UniqueRoot("authz-metrics"));
    cfg.tls_cert_file = server_.cert;
    cfg.tls_key_file = server_.key;
    cfg.tls_client_ca_file = pki_.ca_file();
    cfg.authz_file = policy_file_;
    cfg.metrics_listen = "127.0.0.1:0";
    if (!prefixes.empty()) cfg.metrics_lock_prefixes = prefixes;
    auto r = StartReplica(cfg);
    EXPECT_TRUE(r);
    if (!r) return std::string();
    auto stub = StubAt(r->address(), kAdmin);
    Hold a = AdminHold(stub.get(), "payments/api-lock-2");
    Hold b = AdminHold(stub.get(), "search/index-2");
    auto got = HttpGet(r->metrics_port(), "/metrics");
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? got->body : std::string();
  };
  std::string body = scrape("");  // the default: "auto"
  EXPECT_NE(body.find("turnstile_lock_holders{lock=\"_hidden\"} 2"), std::string::npos) << body;
  EXPECT_EQ(body.find("payments/"), std::string::npos) << body;
  EXPECT_EQ(body.find("search/"), std::string::npos) << body;
  body = scrape("search/");
  EXPECT_NE(body.find("turnstile_lock_holders{lock=\"search/index-2\"} 1"), std::string::npos) << body;
  EXPECT_NE(body.find("turnstile_lock_holders{lock=\"_hidden\"} 1"), std::string::npos) << body;
  EXPECT_EQ(body.find("payments/"), std::string::npos) << body;
  body = scrape("*");
  EXPECT_NE(body.find("turnstile_lock_holders{lock=\"payments/api-lock-2\"} 1"), std::string::npos) << body;
  EXPECT_EQ(body.find("{lock=\"_hidden\"}"), std::string::npos) << body;
}

// The identity rule: first URI SAN, else first DNS SAN, else subject CN.
TEST(ClientCertIdentity, UriThenDnsThenCommonName) {
  TestPki pki;
  auto v = ClientCertVerifier::Create(ReadFile(pki.ca_file()));
  ASSERT_TRUE(v.ok()) << v.status();
  struct {
    std::string san, cn, want;
  } cases[] = {
      {"DNS:a.example,URI:spiffe://x/first,URI:spiffe://x/second", "cn", "spiffe://x/first"},
      {"DNS:a.example,DNS:b.example", "cn", "a.example"},
      {"", "just-a-cn", "just-a-cn"},
  };
  int i = 0;
  for (const auto& c : cases) {
    CertSpec spec;
    spec.san = c.san;
    spec.cn = c.cn;
    auto f = pki.Issue(absl::StrCat("id", i++), spec);
    auto id = (*v)->IdentifyPem(ReadFile(f.cert), "");
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, c.want);
  }
}

// The decision rules, on their own (the table above runs them end to end).
// Issue 24: the policy looks rules up by lock prefix instead of walking
// them all. It must decide exactly as walking every rule does (the
// reference below, written from authz.proto's rules), on random policies.
TEST(AuthzPolicyRules, TheIndexDecidesAsWalkingEveryRule) {
  std::mt19937 rng(24);
  const std::vector<std::string> ids = {"spiffe://a/x", "spiffe://a/y", "spiffe://b/z"};
  const std::vector<std::string> id_patterns = {"spiffe://a/x", "spiffe://a/*", "*",
                                                "spiffe://*/z", "spiffe://b/z"};
  const std::vector<std::string> prefixes = {"", "p", "pa", "pay/", "pay/x", "q/", "pay/xy"};
  const std::vector<std::string> names = {"", "p", "pay/x", "pay/xyz", "pa", "q/1", "zz"};
  const char* actions[] = {"acquire", "describe", "list", "release", "revoke", "keepalive",
                           "proclaim"};
  int decided = 0;
  for (int round = 0; round < 300; ++round) {
    struct RefRule {
      std::vector<std::string> ids, locks;
      uint32_t actions = 0;
      bool deny = false;
    };
    std::vector<RefRule> ref;
    std::string json = "{\"rules\": [";
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < n; ++i) {
      RefRule r;
      r.ids = {id_patterns[rng() % id_patterns.size()]};
      r.locks = {prefixes[rng() % prefixes.size()]};
      if (rng() % 3 == 0) r.locks.push_back(prefixes[rng() % prefixes.size()]);
      r.deny = rng() % 5 == 0;
      std::string acts;
      if (!r.deny) {
        for (int a = 0; a < 7; ++a) {
          if (rng() % 2) {
            r.actions |= 1u << a;
            acts += std::string(acts.empty() ? "" : ",") + "\"" + actions[a] + "\"";
          }
        }
        if (r.actions == 0) {
          r.actions = 1;
          acts = "\"acquire\"";
        }
      }
      std::string locks;
      for (const auto& l : r.locks) locks += std::string(locks.empty() ? "" : ",") + "\"" + l + "\"";
      json += absl::StrCat(i ? "," : "", "{\"identities\": [\"", r.ids[0], "\"], \"locks\": [", locks,
                           "], ", r.deny ? "\"deny\": true" : "\"actions\": [" + acts + "]", "}");
      ref.push_back(r);
    }
    json += "]}";
    auto p = AuthzPolicy::Parse(json);
    ASSERT_TRUE(p.ok()) << p.status() << json;
    for (const auto& id : ids) {
      for (const auto& name : names) {
        for (int a = 0; a < 7; ++a) {
          // The reference: walk every rule.
          int best = -1;
          std::tuple<int, int, bool> best_key{-1, -1, false};
          for (size_t ri = 0; ri < ref.size(); ++ri) {
            const RefRule& r = ref[ri];
            int spec = -1;
            for (const auto& pat : r.ids) {
              if (!IdentityMatches(pat, id)) continue;
              const int lit = pat.find('*') == std::string::npos
                                  ? INT_MAX
                                  : static_cast<int>(pat.size() - std::count(pat.begin(), pat.end(), '*'));
              spec = std::max(spec, lit);
            }
            if (spec < 0) continue;
            int len = -1;
            for (const auto& l : r.locks) {
              if (name.rfind(l, 0) == 0) len = std::max(len, static_cast<int>(l.size()));
            }
            if (len < 0) continue;
            std::tuple<int, int, bool> key{spec, len, r.deny};
            if (best < 0 || key > best_key) {
              best = static_cast<int>(ri);
              best_key = key;
            }
          }
          const bool want = best >= 0 && !ref[best].deny && ((ref[best].actions >> a) & 1u);
          const bool got = (*p)->Check(id, static_cast<AuthzAction>(a), name).allowed;
          ASSERT_EQ(got, want) << json << " " << id << " " << actions[a] << " \"" << name << "\"";
          ++decided;
        }
      }
    }
  }
  EXPECT_EQ(decided, 300 * 3 * 7 * 7);
}

TEST(AuthzPolicyRules, MostSpecificRuleDecidesAndInvalidPoliciesAreRefused) {
  auto p = AuthzPolicy::Parse(kPolicy);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE((*p)->Check(kBatch, AuthzAction::kRevoke, "payments/batch/x").allowed);
  EXPECT_FALSE((*p)->Check(kApi, AuthzAction::kRevoke, "payments/batch/x").allowed);
  EXPECT_FALSE((*p)->Check(kRetired, AuthzAction::kDescribe, "payments/a").allowed);
  EXPECT_FALSE((*p)->Check("spiffe://elsewhere/x", AuthzAction::kDescribe, "payments/a").allowed);
  EXPECT_TRUE(IdentityMatches("spiffe://a/*/api", "spiffe://a/ns/x/api"));
  EXPECT_FALSE(IdentityMatches("spiffe://a/*/api", "spiffe://a/ns/x/apix"));
  for (const char* bad : {
           "", "[]", R"({"rules": [{"identities": [], "locks": [""], "admin": true}]})",
           R"({"rules": [{"identities": ["*"], "locks": [], "admin": true}]})",
           R"({"rules": [{"identities": ["*"], "locks": [""]}]})",
           R"({"rules": [{"identities": ["*"], "locks": [""], "deny": true, "admin": true}]})",
           R"({"rules": [{"identities": ["*"], "locks": [""], "actions": ["acquire"], "x": 1}]})",
       }) {
    EXPECT_FALSE(AuthzPolicy::Parse(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace turnstile::testing
