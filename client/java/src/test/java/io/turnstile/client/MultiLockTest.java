package io.turnstile.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import turnstile.v1.Lock.AcquireEvent;
import turnstile.v1.Lock.Suspended;

/** acquireAll against a scripted in-process replica (no ZooKeeper). */
class MultiLockTest {
  private ScriptedReplica replica;

  @AfterEach
  void stop() {
    if (replica != null) {
      replica.close();
    }
  }

  static long tokenOf(String name) {
    return 100 + name.codePointAt(0);
  }

  private static List<String> sorted(List<String> l) {
    List<String> out = new ArrayList<>(l);
    out.sort(null);
    return out;
  }

  @Test
  void takesTheLocksInByteOrderEachWithItsToken() throws Exception {
    replica = new ScriptedReplica((n, open, s) -> s.grant(tokenOf(open.getName())), null, null);
    // By UTF-8 bytes "｡" (EF BD A1) sorts before "😀" (F0 9F 98 80),
    // although String.compareTo (UTF-16) puts the emoji first.
    List<String> names = List.of("b", "\uD83D\uDE00", "a", "Z", "\uFF61");
    List<String> canonical = List.of("Z", "a", "b", "\uFF61", "\uD83D\uDE00");
    assertEquals(canonical, TurnstileClient.canonicalOrder(names));
    try (MultiHold m = replica.client.acquireAll(names, AcquireOptions.builder().owner("multi")
        .waitTimeout(Duration.ofSeconds(5)).build())) {
      assertEquals(canonical, replica.openNames());
      assertEquals(canonical, m.names());
      for (String n : names) {
        assertEquals(tokenOf(n), m.fencingToken(n));
        assertEquals("lease-" + n, m.hold(n).get().leaseId());
      }
      for (var o : replica.opens) {
        assertEquals("multi", o.getOwner());
        long waitMs = o.getWaitTimeout().getSeconds() * 1000 + o.getWaitTimeout().getNanos() / 1_000_000;
        assertTrue(waitMs > 0 && waitMs <= 5000, "wait " + waitMs);
      }
      assertTrue(m.isHeld());
      m.release();
      assertTrue(m.awaitEnd(Duration.ofSeconds(5)));
      assertFalse(m.isHeld());
      assertTrue(m.lostName().isEmpty());
    }
    assertEquals(sorted(canonical), sorted(replica.released));
  }

  @Test
  void badInputIsRefusedBeforeAnyCall() throws Exception {
    replica = new ScriptedReplica((n, open, s) -> s.grant(1), null, null);
    for (List<String> names : List.of(List.of("a", "b", "a"), List.<String>of(), List.of("a", ""),
        List.of("a", "bad\u0001name"))) {
      TurnstileException e = assertThrows(TurnstileException.class,
          () -> replica.client.acquireAll(names, AcquireOptions.builder().tryOnce().build()));
      assertEquals(Status.Code.INVALID_ARGUMENT, e.getCode(), names.toString());
    }
    assertEquals(List.of(), replica.opens);
  }

  @Test
  void aFailureOnTheThirdLockReleasesTheFirstTwo() throws Exception {
    for (Status.Code code : List.of(Status.Code.DEADLINE_EXCEEDED, Status.Code.FAILED_PRECONDITION)) {
      replica = new ScriptedReplica((n, open, s) -> {
        if (open.getName().equals("c")) {
          s.fail(Status.fromCode(code).withDescription("scripted refusal"));
        } else {
          s.grant(tokenOf(open.getName()));
        }
      }, null, null);
      AcquireOptions o = code == Status.Code.FAILED_PRECONDITION
          ? AcquireOptions.builder().tryOnce().build()
          : AcquireOptions.builder().waitTimeout(Duration.ofSeconds(2)).build();
      TurnstileException e = assertThrows(TurnstileException.class,
          () -> replica.client.acquireAll(List.of("d", "c", "b", "a"), o));
      assertEquals(code, e.getCode());
      assertTrue(e.getMessage().contains("\"c\""), e.getMessage());
      assertEquals(List.of("a", "b", "c"), replica.openNames());  // d never asked for
      assertEquals(List.of("a", "b"), sorted(replica.released));  // before it threw
      for (var open : replica.opens) {
        boolean waits = open.getWaitTimeout().getSeconds() > 0 || open.getWaitTimeout().getNanos() > 0;
        assertEquals(code == Status.Code.DEADLINE_EXCEEDED, waits, open.getName());
      }
      replica.close();
      replica = null;
    }
  }

  @Test
  void oneHoldInDoubtBreaksTheSetAndTheRestIsReleased() throws Exception {
    replica = new ScriptedReplica((n, open, s) -> s.grant(tokenOf(open.getName())), null, null);
    CountDownLatch told = new CountDownLatch(1);
    AtomicReference<String> who = new AtomicReference<>();
    MultiHold m = replica.client.acquireAll(List.of("a", "b", "c"),
        AcquireOptions.builder().waitTimeout(Duration.ofSeconds(5)).build(),
        (set, name, reason) -> {
          who.set(name + "/" + reason);
          told.countDown();
        });
    assertTrue(m.isHeld());
    assertFalse(m.awaitEnd(Duration.ofMillis(1)));
    replica.streams.get("b").send(AcquireEvent.newBuilder().setType(AcquireEvent.Type.SUSPENDED)
        .setSuspended(Suspended.newBuilder().setSafeFor(ScriptedReplica.ms(60_000))).build());
    assertTrue(told.await(10, TimeUnit.SECONDS));
    assertEquals("b/SUSPENDED", who.get());
    assertTrue(m.awaitEnd(Duration.ofSeconds(1)));
    assertFalse(m.isHeld());
    assertEquals("b", m.lostName().get());
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (sorted(replica.released).size() < 3 && System.nanoTime() < deadline) {
      Thread.sleep(10);  // polling the fake's record: the releases run on another thread
    }
    assertEquals(List.of("a", "b", "c"), sorted(replica.released));
    m.release();  // fine after the set broke
  }
}
