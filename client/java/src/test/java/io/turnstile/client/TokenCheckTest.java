package io.turnstile.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import turnstile.v1.Lock.CheckTokenRequest;
import turnstile.v1.Lock.CheckTokenResponse;

/**
 * checkToken against a scripted replica that answers as if lock "L" had the holder 7 and the
 * waiter 9; "denied" is refused by policy; "future" answers a verdict this library does not know.
 */
class TokenCheckTest {
  private ScriptedReplica replica;

  @BeforeEach
  void start() throws Exception {
    replica = new ScriptedReplica(null, null, null);
    replica.checkToken = TokenCheckTest::answer;
  }

  @AfterEach
  void stop() {
    replica.close();
  }

  static CheckTokenResponse answer(CheckTokenRequest r) {
    if (r.getName().isEmpty() || r.getFencingToken() == 0) {
      throw Status.INVALID_ARGUMENT.withDescription("name or fencing_token").asRuntimeException();
    }
    if (r.getName().equals("denied")) {
      throw Status.PERMISSION_DENIED.withDescription("describe").asRuntimeException();
    }
    CheckTokenResponse.Builder b = CheckTokenResponse.newBuilder().setHighestHolderToken(7)
        .setLinearizable(!r.getAllowStale());
    if (r.getName().equals("future")) {
      b.setVerdictValue(99);
    } else if (r.getFencingToken() == 7) {
      b.setVerdict(CheckTokenResponse.Verdict.CURRENT);
    } else if (r.getFencingToken() == 9) {
      b.setVerdict(CheckTokenResponse.Verdict.WAITING);
    } else {
      b.setVerdict(CheckTokenResponse.Verdict.SUPERSEDED);
    }
    return b.build();
  }

  @Test
  void verdictsAndTheStaleOption() {
    TurnstileClient client = replica.client;
    assertEquals(new TokenCheck(TokenVerdict.CURRENT, 7, true), client.checkToken("L", 7));
    assertTrue(client.checkToken("L", 7).isCurrent());
    assertEquals(new TokenCheck(TokenVerdict.SUPERSEDED, 7, true), client.checkToken("L", 5));
    assertFalse(client.checkToken("L", 5).isCurrent());
    assertEquals(new TokenCheck(TokenVerdict.WAITING, 7, true), client.checkToken("L", 9));
    assertEquals(new TokenCheck(TokenVerdict.CURRENT, 7, false), client.checkToken("L", 7, true));
    CheckTokenRequest last = replica.checks.get(replica.checks.size() - 1);
    assertEquals("L", last.getName());
    assertEquals(7, last.getFencingToken());
    assertTrue(last.getAllowStale());
    // a token above Long.MAX_VALUE (uint64 on the wire) goes through as its bits
    client.checkToken("L", -1L);
    assertEquals(-1L, replica.checks.get(replica.checks.size() - 1).getFencingToken());
  }

  @Test
  void codesArePassedOn() {
    for (Object[] c : new Object[][] {{"L", 0L, Status.Code.INVALID_ARGUMENT},
        {"", 7L, Status.Code.INVALID_ARGUMENT}, {"denied", 7L, Status.Code.PERMISSION_DENIED},
        {"future", 7L, Status.Code.UNKNOWN}}) {
      TurnstileException e = assertThrows(TurnstileException.class,
          () -> replica.client.checkToken((String) c[0], (Long) c[1]));
      assertEquals(c[2], e.getCode(), c[0] + " " + c[1]);
    }
  }
}
