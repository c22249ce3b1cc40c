#include "server/recipe/lock_name.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/common/lock_name.h"
#include "gtest/gtest.h"

namespace turnstile {
namespace {

using std::string_literals::operator""s;

const std::string kUid = "0123456789abcdef";

// ---------------------------------------------------------------------------
// ValidateLockName

TEST(ValidateLockNameTest, AcceptsValidNames) {
  const std::vector<std::string> names = {
      "a", "orders", "with space", "/a/b", ".", "..", "...", "a.b", "%",
      "%41", "zookeeper", "ключ", "锁", "emoji \xF0\x9F\x94\x92",
      "\xC2\xA0",  // U+00A0, first code point after the C1 block
      "~", std::string(kMaxLockNameBytes, 'x'),
  };
  for (const std::string& name : names) {
    EXPECT_TRUE(ValidateLockName(name).ok()) << name;
  }
}

TEST(ValidateLockNameTest, RejectsInvalidNames) {
  struct Case {
    std::string name;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"", "empty"},
      {std::string(kMaxLockNameBytes + 1, 'x'), "256"},
      {std::string(1000, 'x'), "256"},
      {"\x01", "U+0001"},
      {"a\x1f", "U+001F"},
      {"a\0b"s, "U+0000"},
      {"\n", "U+000A"},
      {"\x7f", "U+007F"},
      {"\xC2\x80", "U+0080"},
      {"x\xC2\x9F", "U+009F"},
      {"\xff", "UTF-8"},
      {"\xC0\xAF", "UTF-8"},          // overlong '/'
      {"\xE0\x80\xAF", "UTF-8"},      // overlong '/'
      {"\xED\xA0\x80", "UTF-8"},      // surrogate U+D800
      {"\xF4\x90\x80\x80", "UTF-8"},  // > U+10FFFF
      {"\xE9\x94", "UTF-8"},          // truncated 3-byte sequence
      {"\x80", "UTF-8"},              // lone continuation byte
  };
  for (const Case& c : cases) {
    absl::Status s = ValidateLockName(c.name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message_part;
    EXPECT_TRUE(absl::StartsWith(s.message(), "name: ")) << s.message();
    EXPECT_TRUE(absl::StrContains(s.message(), c.message_part)) << s.message();
  }
}

TEST(ValidateLockNameTest, LengthBoundaryCountsBytesNotCharacters) {
  // "锁" is 3 bytes: 85 of them (255 bytes) fit, 86 (258 bytes) do not.
  std::string fits, too_long;
  for (int i = 0; i < 85; ++i) fits += "锁";
  too_long = fits + "锁";
  EXPECT_TRUE(ValidateLockName(fits).ok());
  EXPECT_TRUE(ValidateLockName(fits + "x").ok());  // exactly 256
  EXPECT_FALSE(ValidateLockName(too_long).ok());
}

// ---------------------------------------------------------------------------
// EncodeLockName / DecodeLockName

TEST(LockNameEncodingTest, KnownEncodings) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"orders", "orders"},
      {"A-z_0.9:@+=,~", "A-z_0.9:@+=,~"},
      {"with space", "with%20space"},
      {"/a/b", "%2Fa%2Fb"},
      {".", "%2E"},
      {"..", "%2E%2E"},
      {"...", "%2E%2E%2E"},
      {"a.b", "a.b"},
      {".a", ".a"},
      {"%", "%25"},
      {"%41", "%2541"},
      {"zookeeper", "zookeeper"},
      {"锁", "%E9%94%81"},
      {"a*b?c", "a%2Ab%3Fc"},
  };
  for (const auto& [name, segment] : cases) {
    EXPECT_EQ(EncodeLockName(name), segment) << name;
    absl::StatusOr<std::string> decoded = DecodeLockName(segment);
    ASSERT_TRUE(decoded.ok()) << segment << ": " << decoded.status();
    EXPECT_EQ(*decoded, name);
  }
}

TEST(LockNameEncodingTest, RoundTripsAndProducesOneValidSegment) {
  std::vector<std::string> names = {
      "a", "with space", "/a/b", "/", "//", ".", "..", "...", "....", "a.b",
      "%", "%41", "%%", "zookeeper", "ключ", "锁", "mixed/ключ/锁 %2E",
      "\xC2\xA0", "\xEF\xBF\xBF",  // U+FFFF: fine in a name, escaped in a path
      "\xEE\x80\x80",              // U+E000: ZooKeeper forbids it raw
      std::string(kMaxLockNameBytes, 'x'), std::string(kMaxLockNameBytes, '.'),
      std::string(kMaxLockNameBytes, '/'),
  };
  // Every printable ASCII byte, singly and inside a name.
  for (int c = 0x20; c < 0x7F; ++c) {
    names.push_back(std::string(1, static_cast<char>(c)));
    names.push_back(absl::StrCat("a", std::string(1, static_cast<char>(c)), "b"));
  }
  for (const std::string& name : names) {
    ASSERT_TRUE(ValidateLockName(name).ok()) << name;
    const std::string segment = EncodeLockName(name);
    EXPECT_FALSE(segment.empty());
    EXPECT_EQ(segment.find('/'), std::string::npos) << segment;
    EXPECT_NE(segment, ".");
    EXPECT_NE(segment, "..");
    for (char c : segment) {
      // Pure printable ASCII, so none of ZooKeeper's forbidden characters.
      EXPECT_GE(c, 0x21) << segment;
      EXPECT_LE(c, 0x7E) << segment;
    }
    absl::StatusOr<std::string> decoded = DecodeLockName(segment);
    ASSERT_TRUE(decoded.ok()) << segment << ": " << decoded.status();
    EXPECT_EQ(*decoded, name);
  }
}

TEST(LockNameEncodingTest, DecodeRejectsNonCanonicalSegments) {
  const std::vector<std::string> bad = {
      "",
      ".",             // must be %2E
      "..",            // must be %2E%2E
      ".%2E",          // mixed dot spellings
      "%2E.",
      "a%2Eb",         // dot needlessly escaped
      "%41",           // 'A' needlessly escaped
      "%5F",           // '_' needlessly escaped
      "%2f",           // lowercase hex
      "%e9%94%81",     // lowercase hex
      "%",             // truncated escape
      "%2",            // truncated escape
      "a%",            // truncated escape
      "%G0",           // not hex
      "%%",            // not hex
      "a b",           // space must be escaped
      "a/b",           // '/' must be escaped
      "a*b",           // '*' must be escaped
      "\xE9\x94\x81",  // raw non-ASCII
      "%00",           // decodes to a forbidden control character
      "%7F",
      "%C2%80",        // U+0080
      "%FF",           // invalid UTF-8
      "%E9%94",        // truncated UTF-8
      "a%0Ab",
  };
  for (const std::string& segment : bad) {
    absl::StatusOr<std::string> decoded = DecodeLockName(segment);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument)
        << "segment \"" << segment << "\" decoded to \""
        << decoded.value_or("") << "\"";
  }
  // Too long once decoded: 257 bytes.
  EXPECT_FALSE(DecodeLockName(std::string(kMaxLockNameBytes + 1, 'x')).ok());
  EXPECT_TRUE(DecodeLockName(std::string(kMaxLockNameBytes, 'x')).ok());
  std::string escaped_257;
  for (size_t i = 0; i <= kMaxLockNameBytes; ++i) escaped_257 += "%20";
  EXPECT_FALSE(DecodeLockName(escaped_257).ok());
}

TEST(LockNameEncodingTest, EveryAcceptedSegmentReencodesIdentically) {
  // Exhaustive over all segments of up to 3 characters drawn from an alphabet
  // that mixes safe bytes, '%', hex digits and unsafe bytes: whatever Decode
  // accepts must be exactly what Encode produces.
  const std::string alphabet = "aZ09.%2E/ f";
  std::vector<std::string> segments;
  std::vector<std::string> previous = {""};
  for (int len = 1; len <= 3; ++len) {
    std::vector<std::string> current;
    for (const std::string& s : previous) {
      for (char c : alphabet) current.push_back(s + c);
    }
    segments.insert(segments.end(), current.begin(), current.end());
    previous = std::move(current);
  }
  // Plus every %XX.
  const char* hex = "0123456789ABCDEFabcdef";
  for (const char* a = hex; *a; ++a) {
    for (const char* b = hex; *b; ++b) {
      segments.push_back(absl::StrCat("%", std::string(1, *a), std::string(1, *b)));
      segments.push_back(absl::StrCat("x%", std::string(1, *a), std::string(1, *b)));
    }
  }
  int accepted = 0;
  for (const std::string& s : segments) {
    absl::StatusOr<std::string> decoded = DecodeLockName(s);
    if (!decoded.ok()) continue;
    ++accepted;
    EXPECT_TRUE(ValidateLockName(*decoded).ok()) << s;
    EXPECT_EQ(EncodeLockName(*decoded), s);
  }
  EXPECT_GT(accepted, 100);
}

// ---------------------------------------------------------------------------
// Contender names

TEST(ContenderNameTest, Prefix) {
  EXPECT_EQ(ContenderNodePrefix(ContenderKind::kExclusive, kUid),
            "x-0123456789abcdef-");
  EXPECT_EQ(ContenderNodePrefix(ContenderKind::kShared, kUid),
            "s-0123456789abcdef-");
  EXPECT_EQ(ContenderNodePrefix(ContenderKind::kSemaphore, kUid, 3),
            "n3-0123456789abcdef-");
}

// A semaphore contender carries its N in its node name, so every contender
// (on any replica) sees each other's N from a listing alone.
TEST(ContenderNameTest, SemaphoreNamesCarryTheirN) {
  for (int32_t n : {1, 3, 10, 1000, kMaxSemaphoreHoldersEver}) {
    const std::string node = ContenderNodePrefix(ContenderKind::kSemaphore, kUid, n) + "0000000042";
    std::optional<ContenderName> parsed = ParseContenderName(node);
    ASSERT_TRUE(parsed.has_value()) << node;
    EXPECT_EQ(parsed->kind, ContenderKind::kSemaphore);
    EXPECT_EQ(parsed->max_holders, n);
    EXPECT_EQ(parsed->uid, kUid);
    EXPECT_EQ(parsed->sequence, 42);
    EXPECT_EQ(parsed->node, node);
    auto lease = ParseLeaseId(FormatLeaseId("lock", node));
    ASSERT_TRUE(lease.ok()) << lease.status();
    EXPECT_EQ(lease->contender.max_holders, n);
  }
  EXPECT_EQ(ParseContenderName("x-0123456789abcdef-0000000042")->max_holders, 0);
  // Only what ContenderNodePrefix writes: no N, N = 0, a leading zero, too
  // large, a sign, or a missing dash.
  for (const char* bad : {"n-0123456789abcdef-0000000042", "n0-0123456789abcdef-0000000042",
                          "n03-0123456789abcdef-0000000042", "n100001-0123456789abcdef-0000000042",
                          "n1000000-0123456789abcdef-0000000042", "n+3-0123456789abcdef-0000000042",
                          "n30123456789abcdef-0000000042", "n3-0123456789abcdef-000000042",
                          "n", "n3"}) {
    EXPECT_FALSE(ParseContenderName(bad).has_value()) << bad;
  }
}

TEST(ContenderNameTest, ParsesValidNames) {
  struct Case {
    std::string seq;
    int32_t value;
  };
  const std::vector<Case> cases = {
      {"0000000000", 0},
      {"0000000042", 42},
      {"2147483647", 2147483647},
      {"-000000005", -5},
      {"-000000001", -1},
      {"-999999999", -999999999},
      {"-1000000000", -1000000000},  // 11 chars: printf pads to a minimum
      {"-2147483647", -2147483647},
      {"-2147483648", INT32_MIN},
  };
  for (const Case& c : cases) {
    for (ContenderKind kind : {ContenderKind::kExclusive, ContenderKind::kShared}) {
      const std::string node = ContenderNodePrefix(kind, kUid) + c.seq;
      std::optional<ContenderName> parsed = ParseContenderName(node);
      ASSERT_TRUE(parsed.has_value()) << node;
      EXPECT_EQ(parsed->kind, kind);
      EXPECT_EQ(parsed->uid, kUid);
      EXPECT_EQ(parsed->sequence, c.value) << node;
      EXPECT_EQ(parsed->node, node);
    }
  }
}

TEST(ContenderNameTest, IgnoresForeignNames) {
  const std::string x = "x-" + kUid + "-";
  const std::vector<std::string> foreign = {
      "",
      "x",
      "x-",
      x,
      "lock-0000000001",
      "read-0000000001",
      "write-" + kUid + "-0000000001",
      "x-ABCDEF0123456789-0000000001",      // uppercase uid
      "x-0123456789abcdeg-0000000001",      // non-hex uid
      "x-0123456789abcde-0000000001",       // 15 hex chars
      "x-0123456789abcdef0-0000000001",     // 17 hex chars
      "x-0123456789abcde-00000000001",      // 15 hex, seq shifted
      "X-" + kUid + "-0000000001",          // wrong letter case
      "r-" + kUid + "-0000000001",
      "x_" + kUid + "-0000000001",
      "x-" + kUid + "_0000000001",
      x + "000000001",                      // 9 digits
      x + "00000000012",                    // 11 digits
      x + "2147483648",                     // int32 overflow
      x + "9999999999",
      x + "-2147483649",                    // int32 underflow
      x + "-000000000",                     // printf never writes -0
      x + "-0000000005",                    // 11 chars but padded
      x + "-00000005",                      // 9 chars
      x + "+000000005",
      x + " 000000005",
      x + "000000005 ",
      x + "0000000001x",
      x + "000000000x",
      x + "0x00000001",
      x + "--00000001",
      x + "0000000001\n",
      "x-" + kUid + "-0000000001/child",
  };
  for (const std::string& node : foreign) {
    EXPECT_FALSE(ParseContenderName(node).has_value()) << node;
  }
}

TEST(ContenderNameTest, NewUidFormatAndUniqueness) {
  std::set<std::string> seen;
  for (int i = 0; i < 10000; ++i) {
    const std::string uid = NewContenderUid();
    ASSERT_EQ(uid.size(), 16u) << uid;
    for (char c : uid) {
      ASSERT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << uid;
    }
    ASSERT_TRUE(seen.insert(uid).second) << "duplicate uid " << uid;
    // Every fresh uid must make a parseable contender node.
    if (i < 100) {
      EXPECT_TRUE(ParseContenderName(
                      ContenderNodePrefix(ContenderKind::kShared, uid) +
                      "0000000007")
                      .has_value());
    }
  }
  // 10000 draws of 64 bits must use the whole range, not e.g. 32 bits.
  bool high_bits_used = false;
  for (const std::string& uid : seen) {
    if (uid.substr(0, 8) != "00000000") high_bits_used = true;
  }
  EXPECT_TRUE(high_bits_used);
}

// ---------------------------------------------------------------------------
// Lease ids

TEST(LeaseIdTest, RoundTrip) {
  const std::vector<std::string> names = {"orders", "/a/b", "..", "锁",
                                          std::string(kMaxLockNameBytes, '/')};
  for (const std::string& name : names) {
    const std::string segment = EncodeLockName(name);
    const std::string node =
        ContenderNodePrefix(ContenderKind::kShared, kUid) + "-2147483648";
    const std::string id = FormatLeaseId(segment, node);
    EXPECT_EQ(id, segment + "/" + node);
    absl::StatusOr<LeaseId> parsed = ParseLeaseId(id);
    ASSERT_TRUE(parsed.ok()) << id << ": " << parsed.status();
    EXPECT_EQ(parsed->lock_segment, segment);
    EXPECT_EQ(parsed->lock_name, name);
    EXPECT_EQ(parsed->contender.kind, ContenderKind::kShared);
    EXPECT_EQ(parsed->contender.uid, kUid);
    EXPECT_EQ(parsed->contender.sequence, INT32_MIN);
    EXPECT_EQ(parsed->contender.node, node);
  }
}

TEST(LeaseIdTest, RejectsMalformedIds) {
  const std::string node = "x-" + kUid + "-0000000001";
  std::string longest_segment;
  for (size_t i = 0; i < kMaxLockNameBytes; ++i) longest_segment += "%2F";
  const std::vector<std::string> bad = {
      "",
      "orders",
      "orders" + node,
      "/" + node,                      // empty segment
      "orders/",                       // empty node
      "orders/lock-0000000001",        // foreign node
      "orders/" + node + "/extra",
      "orders//" + node,
      "a%2Fb/" + node + "x",
      "a/b/" + node,                   // raw '/' in lock name
      "a%2fb/" + node,                 // lowercase escape
      ".%2E/" + node,                  // non-canonical dots
      "%00/" + node,                   // invalid lock name
      std::string(kMaxLeaseIdBytes + 1, 'a'),
      longest_segment + "/" + node + std::string(300, '0'),
  };
  for (const std::string& id : bad) {
    absl::StatusOr<LeaseId> parsed = ParseLeaseId(id);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_TRUE(absl::StartsWith(parsed.status().message(), "lease_id: "))
        << parsed.status().message();
  }
  // The longest legal id (escaped 256-byte name + 30-byte node) fits.
  const std::string longest =
      FormatLeaseId(longest_segment, "x-" + kUid + "--2147483648");
  EXPECT_EQ(longest.size(), 3 * kMaxLockNameBytes + 1 + 30);
  EXPECT_LE(longest.size(), kMaxLeaseIdBytes);
  EXPECT_TRUE(ParseLeaseId(longest).ok());
}

// ---------------------------------------------------------------------------
// ContenderInfo

void ExpectInfoEq(const ContenderInfo& a, const ContenderInfo& b) {
  EXPECT_EQ(a.owner, b.owner);
  EXPECT_EQ(a.metadata, b.metadata);
  EXPECT_EQ(a.replica_id, b.replica_id);
  EXPECT_EQ(a.started_unix_ms, b.started_unix_ms);
  EXPECT_EQ(a.ttl_ms, b.ttl_ms);
  EXPECT_EQ(a.renewals, b.renewals);
  EXPECT_EQ(a.lock_delay_ms, b.lock_delay_ms);
  EXPECT_EQ(a.revoke_id, b.revoke_id);
  EXPECT_EQ(a.revoke_by, b.revoke_by);
  EXPECT_EQ(a.revoke_reason, b.revoke_reason);
  EXPECT_EQ(a.granted_unix_ms, b.granted_unix_ms);
}

// A semaphore holder's grant mark (issue 21): one optional line.
TEST(ContenderInfoTest, GrantMarkLine) {
  ContenderInfo info;
  info.owner = "o";
  info.replica_id = "r";
  info.renewals = 1;
  info.granted_unix_ms = 1764000000123;
  const std::string data = EncodeContenderInfo(info);
  EXPECT_EQ(data,
            "turnstile-contender v1\nowner=o\nreplica_id=r\nstarted_unix_ms=0\nttl_ms=0\n"
            "renewals=1\ngranted_unix_ms=1764000000123\n");
  auto decoded = DecodeContenderInfo(data);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectInfoEq(*decoded, info);
  info.granted_unix_ms = 0;
  EXPECT_EQ(EncodeContenderInfo(info).find("granted"), std::string::npos);
}

// The renewal and revocation lines (issue 12) appear only when set.
TEST(ContenderInfoTest, RenewalsAndRevocationLines) {
  ContenderInfo info;
  info.owner = "o";
  info.replica_id = "r";
  info.lock_delay_ms = 1500;
  info.renewals = 3;
  info.revoke_id = 2;
  info.revoke_by = "ops=bob";
  info.revoke_reason = "deploy\n";
  const std::string data = EncodeContenderInfo(info);
  EXPECT_EQ(data,
            "turnstile-contender v1\nowner=o\nreplica_id=r\nstarted_unix_ms=0\nttl_ms=0\n"
            "lock_delay_ms=1500\nrenewals=3\nrevoke_id=2\nrevoke_by=ops%3Dbob\n"
            "revoke_reason=deploy%0A\n");
  auto decoded = DecodeContenderInfo(data);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectInfoEq(*decoded, info);
  EXPECT_FALSE(DecodeContenderInfo("turnstile-contender v1\nowner=o\nreplica_id=r\n"
                                   "started_unix_ms=0\nttl_ms=0\nrenewals=-1\n").ok());
}

// Found by tests/fuzz/fuzz_lease_id: a requester or reason without a
// request decoded to fields the encoder would not write back.
TEST(ContenderInfoTest, RevocationTextWithoutARequestIsDropped) {
  auto info = DecodeContenderInfo(
      "turnstile-contender v1\nowner=a\nreplica_id=r\nstarted_unix_ms=1\nttl_ms=0\n"
      "revoke_by=ops\nrevoke_reason=why\n");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->revoke_id, 0);
  EXPECT_EQ(info->revoke_by, "");
  EXPECT_EQ(info->revoke_reason, "");
  auto again = DecodeContenderInfo(EncodeContenderInfo(*info));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->revoke_reason, info->revoke_reason);
  // With a request they are kept.
  auto asked = DecodeContenderInfo(
      "turnstile-contender v1\nowner=a\nreplica_id=r\nstarted_unix_ms=1\nttl_ms=0\n"
      "revoke_id=1\nrevoke_by=ops\nrevoke_reason=why\n");
  ASSERT_TRUE(asked.ok());
  EXPECT_EQ(asked->revoke_reason, "why");
}

TEST(ContenderInfoTest, KnownEncoding) {
  ContenderInfo info;
  info.owner = "alice=ok%\n";
  info.replica_id = "replica-1";
  info.started_unix_ms = 1700000000123;
  info.ttl_ms = 30000;
  info.metadata = {{"host", "h1"}, {"a=b", "c d"}};
  EXPECT_EQ(EncodeContenderInfo(info),
            "turnstile-contender v1\n"
            "owner=alice%3Dok%25%0A\n"
            "replica_id=replica-1\n"
            "started_unix_ms=1700000000123\n"
            "ttl_ms=30000\n"
            "meta.a%3Db=c d\n"
            "meta.host=h1\n");
}

TEST(ContenderInfoTest, RoundTripsAwkwardBytes) {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  std::vector<ContenderInfo> infos(4);
  infos[1].owner = "=";
  infos[1].replica_id = "\n";
  infos[1].metadata = {{"", ""}, {"%", "%25"}, {"=", "=="}, {"\n", "\r\n"}};
  infos[2].owner = "a\0b"s;
  infos[2].replica_id = "ключ 锁";
  infos[2].started_unix_ms = INT64_MIN;
  infos[2].ttl_ms = INT64_MAX;
  infos[2].metadata = {{"k\0"s, "\0v"s}, {"meta.x", "turnstile-contender v1"},
                       {"owner", "mallory"}, {"ключ", "锁"}};
  infos[3].owner = all_bytes;
  infos[3].replica_id = all_bytes + all_bytes;
  infos[3].started_unix_ms = -1;
  infos[3].metadata = {{all_bytes, all_bytes}};
  for (const ContenderInfo& info : infos) {
    const std::string data = EncodeContenderInfo(info);
    absl::StatusOr<ContenderInfo> decoded = DecodeContenderInfo(data);
    ASSERT_TRUE(decoded.ok()) << data << decoded.status();
    ExpectInfoEq(*decoded, info);
    EXPECT_EQ(EncodeContenderInfo(*decoded), data);
  }
}

TEST(ContenderInfoTest, IgnoresUnknownKeysAndAcceptsAnyOrder) {
  absl::StatusOr<ContenderInfo> info = DecodeContenderInfo(
      "turnstile-contender v1\n"
      "ttl_ms=5\n"
      "future_field=anything goes: %zz ==\n"
      "meta.k=v\n"
      "owner=bob\n"
      "=\n"
      "started_unix_ms=7\n"
      "replica_id=r\n");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->owner, "bob");
  EXPECT_EQ(info->replica_id, "r");
  EXPECT_EQ(info->started_unix_ms, 7);
  EXPECT_EQ(info->ttl_ms, 5);
  EXPECT_EQ(info->metadata, (std::map<std::string, std::string>{{"k", "v"}}));
}

TEST(ContenderInfoTest, RejectsGarbage) {
  const std::string head = "turnstile-contender v1\n";
  const std::string body =
      "owner=o\nreplica_id=r\nstarted_unix_ms=1\nttl_ms=2\n";
  ASSERT_TRUE(DecodeContenderInfo(head + body).ok());
  const std::vector<std::string> bad = {
      "",
      "\n",
      "garbage",
      body,                                            // no header
      "turnstile-contender v2\n" + body,               // unknown version
      "turnstile-contender v1 \n" + body,
      "turnstile-contender\n" + body,
      "Turnstile-contender v1\n" + body,
      head,                                            // missing fields
      head + "owner=o\nreplica_id=r\nstarted_unix_ms=1\n",
      head + body.substr(0, body.size() - 1),          // no final newline
      head + body + "\n",                              // empty line
      head + body + "novalue\n",
      head + body + "owner=o\n",                       // duplicate
      head + body + "ttl_ms=2\n",
      head + body + "meta.k=1\nmeta.k=2\n",
      head + body + "meta.k%3d=v\n",                   // lowercase hex
      head + body + "meta.k=%4\n",                     // truncated escape
      head + body + "meta.k=%\n",
      head + body + "meta.k=%G1\n",
      head + body + "meta.k=a=b\n",                    // raw '='
      head + body + "meta.k=%41\n",                    // needless escape
      head + body + "meta.k=\x01\n",                   // raw control byte
      head + body + "meta.k=\xE9\x94\x81\n",           // raw non-ASCII
      head + body + "meta.k=\r\n",
      head + "owner=o\r\nreplica_id=r\nstarted_unix_ms=1\nttl_ms=2\n",
      head + "owner=o\nreplica_id=r\nstarted_unix_ms=+1\nttl_ms=2\n",
      head + "owner=o\nreplica_id=r\nstarted_unix_ms=01\nttl_ms=2\n",
      head + "owner=o\nreplica_id=r\nstarted_unix_ms=-0\nttl_ms=2\n",
      head + "owner=o\nreplica_id=r\nstarted_unix_ms= 1\nttl_ms=2\n",
      head + "owner=o\nreplica_id=r\nstarted_unix_ms=\nttl_ms=2\n",
      head + "owner=o\nreplica_id=r\nstarted_unix_ms=1\n"
             "ttl_ms=9223372036854775808\n",
      head + "owner=o\nreplica_id=r\nstarted_unix_ms=1\nttl_ms=0x10\n",
      std::string("\0\0\0\0", 4),
  };
  for (const std::string& data : bad) {
    absl::StatusOr<ContenderInfo> info = DecodeContenderInfo(data);
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument)
        << "accepted: \"" << data << "\"";
  }
}

}  // namespace
}  // namespace turnstile
