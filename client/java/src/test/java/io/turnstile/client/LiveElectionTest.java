package io.turnstile.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The election helpers and acquireAll against real replicas, when
 * tests/java_live_test.py starts them (ctest java_client_live_test):
 * TURNSTILE_LIVE_A and _B are two replicas' addresses, TURNSTILE_LIVE_CAPPED
 * one with --max-wait-timeout 2s. Without them these tests are skipped.
 */
@Timeout(60)
class LiveElectionTest {
  private TurnstileClient a;
  private TurnstileClient b;
  private final List<AutoCloseable> toClose = new ArrayList<>();
  // Threads of their own: the common pool has one thread on two cores.
  private final ExecutorService pool = Executors.newCachedThreadPool();

  @BeforeEach
  void connect() {
    String addrA = System.getenv("TURNSTILE_LIVE_A");
    String addrB = System.getenv("TURNSTILE_LIVE_B");
    Assumptions.assumeTrue(addrA != null && !addrA.isEmpty() && addrB != null && !addrB.isEmpty(),
        "no replicas (run tests/java_live_test.py)");
    a = TurnstileClient.builder(addrA).plaintext().build();
    b = TurnstileClient.builder(addrB).plaintext().build();
  }

  @AfterEach
  void close() throws Exception {
    pool.shutdownNow();
    for (AutoCloseable c : toClose) {
      c.close();
    }
    if (a != null) {
      a.close();
    }
    if (b != null) {
      b.close();
    }
  }

  private static LeaderEvent next(BlockingQueue<LeaderEvent> q) throws InterruptedException {
    LeaderEvent ev = q.poll(20, TimeUnit.SECONDS);
    assertNotNull(ev, "no leader event within 20 s");
    return ev;
  }

  /** Reads leader events until one (known) satisfies ok; fails after 20 s. */
  private static Leader await(BlockingQueue<LeaderEvent> q, String what, Predicate<Leader> ok)
      throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    while (System.nanoTime() < deadline) {
      LeaderEvent ev = next(q);
      if (!ev.unknown() && ok.test(ev.leader())) {
        return ev.leader();
      }
    }
    fail("observers never saw " + what);
    return null;
  }

  private Observation observe(TurnstileClient c, String name, BlockingQueue<LeaderEvent> q) {
    Observation o = c.observeLeader(name, new LeaderListener() {
      @Override
      public void onLeader(LeaderEvent ev) {
        q.add(ev);
      }

      @Override
      public void onError(TurnstileException e) {
        q.add(new LeaderEvent(null, true, "ERROR " + e.getMessage()));
      }
    });
    toClose.add(o);
    return o;
  }

  @Test
  void campaignObserveProclaimResign() throws Exception {
    String name = "jlive/election";
    BlockingQueue<LeaderEvent> obs = new LinkedBlockingQueue<>();
    observe(b, name, obs);
    LeaderEvent first = next(obs);
    assertFalse(first.unknown());
    assertNull(first.leader());
    BlockingQueue<Boolean> calls = new LinkedBlockingQueue<>();
    Election e = a.election(name, ElectionOptions.builder().owner("alice")
        .onLeadership((is, why) -> calls.add(is)).build());
    Leadership l = e.campaign("10.0.0.1:8080", Duration.ofSeconds(20));
    assertTrue(e.isLeader());
    assertTrue(calls.poll(10, TimeUnit.SECONDS));
    Leader seen = await(obs, "the leader", x -> x != null);
    assertEquals("10.0.0.1:8080", seen.value());
    assertEquals("alice", seen.owner());
    assertEquals(l.fencingToken(), seen.fencingToken());
    e.proclaim("10.0.0.2:8080");
    seen = await(obs, "the proclaimed value", x -> x == null || !x.value().equals("10.0.0.1:8080"));
    assertEquals("10.0.0.2:8080", seen.value());
    assertEquals(l.fencingToken(), seen.fencingToken());
    assertEquals("10.0.0.2:8080", b.leader(name).get().value());
    assertEquals("10.0.0.2:8080", b.describe(name).get().holders().get(0).metadata().get("value"));
    // A wrong token is refused and changes nothing.
    assertEquals(Status.Code.FAILED_PRECONDITION, assertThrows(TurnstileException.class,
        () -> b.proclaim(l.leaseId(), l.fencingToken() + 1, Map.of("value", "evil"))).getCode());
    e.resign();
    assertFalse(e.isLeader());
    assertFalse(calls.poll(10, TimeUnit.SECONDS));
    await(obs, "no leader after resign", x -> x == null);
    assertEquals(Status.Code.NOT_FOUND,
        assertThrows(TurnstileException.class, () -> e.proclaim("late")).getCode());
    assertEquals(Status.Code.NOT_FOUND, assertThrows(TurnstileException.class,
        () -> b.proclaim(l.leaseId(), l.fencingToken(), Map.of("value", "late"))).getCode());
    assertTrue(b.leader(name).isEmpty());
    // A second term: the first term's token is stale for the new lease.
    Leadership l2 = e.campaign("v2", Duration.ofSeconds(20));
    try {
      assertTrue(l2.fencingToken() > l.fencingToken());
      assertEquals(Status.Code.FAILED_PRECONDITION, assertThrows(TurnstileException.class,
          () -> b.proclaim(l2.leaseId(), l.fencingToken(), Map.of("value", "old"))).getCode());
      await(obs, "the second term", x -> x != null && x.fencingToken() == l2.fencingToken());
      assertEquals("v2", a.describe(name).get().holders().get(0).metadata().get("value"));
    } finally {
      e.resign();
    }
  }

  private void untilWaiters(String name, int n) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    while (a.describe(name).map(d -> d.waiters().size()).orElse(0) != n) {
      assertTrue(System.nanoTime() < deadline, name + ": never " + n + " waiters");
      Thread.sleep(20);  // polling the server's view: no event to wait on
    }
  }

  @Test
  void resignHandsLeadershipOnInOrder() throws Exception {
    String name = "jlive/handover";
    BlockingQueue<LeaderEvent> obs = new LinkedBlockingQueue<>();
    observe(a, name, obs);
    Election e1 = a.election(name, ElectionOptions.builder().owner("first").build());
    Election e2 = b.election(name, ElectionOptions.builder().owner("second").build());
    Election e3 = a.election(name, ElectionOptions.builder().owner("third").build());
    Leadership l1 = e1.campaign("one", Duration.ofSeconds(20));
    CompletableFuture<Leadership> r2 =
        CompletableFuture.supplyAsync(() -> e2.campaign("two", Duration.ofSeconds(40)), pool);
    untilWaiters(name, 1);
    CompletableFuture<Leadership> r3 =
        CompletableFuture.supplyAsync(() -> e3.campaign("three", Duration.ofSeconds(40)), pool);
    untilWaiters(name, 2);
    assertFalse(e2.isLeader() || e3.isLeader());
    e1.resign();
    Leadership l2 = r2.get(20, TimeUnit.SECONDS);
    assertTrue(e2.isLeader());
    assertFalse(e3.isLeader());
    // An observer gets the latest state, not every intermediate one (the
    // proto says so): a leader that resigns before the observer's read of
    // the lock is coalesced away. So wait until "two" is seen before the
    // next change.
    List<String> order = new ArrayList<>();
    seeLeader(obs, order, "two");
    e2.resign();
    Leadership l3 = r3.get(20, TimeUnit.SECONDS);
    assertTrue(e3.isLeader());
    seeLeader(obs, order, "three");
    e3.resign();
    assertTrue(l1.fencingToken() < l2.fencingToken() && l2.fencingToken() < l3.fencingToken());
    // The leaders one after the other, in order (a moment without a
    // leader between two is allowed).
    assertEquals(List.of("one", "two", "three"), order);
  }

  /** Reads leader events into order (each new leader's value once) until want leads. */
  private static void seeLeader(BlockingQueue<LeaderEvent> q, List<String> order, String want)
      throws InterruptedException {
    while (order.isEmpty() || !order.get(order.size() - 1).equals(want)) {
      LeaderEvent ev = next(q);
      if (ev.unknown() || ev.leader() == null) {
        continue;
      }
      if (order.isEmpty() || !order.get(order.size() - 1).equals(ev.leader().value())) {
        order.add(ev.leader().value());
      }
      assertTrue(order.size() <= 3, "observed leaders " + order);
    }
  }

  @Test
  void campaignQueuesAgainThroughACappedReplica() throws Exception {
    String capped = System.getenv("TURNSTILE_LIVE_CAPPED");
    Assumptions.assumeTrue(capped != null && !capped.isEmpty(), "no capped replica");
    TurnstileClient c = TurnstileClient.builder(capped).plaintext().build();
    toClose.add(c);
    String name = "jlive/capped-election";
    Election first = a.election(name);
    first.campaign("first", Duration.ofSeconds(20));
    assertEquals(Status.Code.INVALID_ARGUMENT, assertThrows(TurnstileException.class,
        () -> c.acquire(name, AcquireOptions.builder().waitTimeout(Duration.ofSeconds(10))
            .build())).getCode(), "the replica refuses waits above 2 s");
    Election patient = c.election(name, ElectionOptions.builder().owner("patient").build());
    long t0 = System.nanoTime();
    CompletableFuture<Leadership> r =
        CompletableFuture.supplyAsync(() -> patient.campaign("second", Duration.ofSeconds(40)), pool);
    // Held past two of the replica's caps, then resigned.
    assertThrows(java.util.concurrent.TimeoutException.class, () -> r.get(5, TimeUnit.SECONDS));
    first.resign();
    r.get(20, TimeUnit.SECONDS);
    assertTrue(patient.isLeader());
    assertTrue(System.nanoTime() - t0 >= TimeUnit.SECONDS.toNanos(5));
    Leader l = a.leader(name, Duration.ofSeconds(10)).get();
    assertEquals("second", l.value());
    assertEquals("patient", l.owner());
    patient.resign();
    // The caller's own deadline still ends a campaign.
    first.campaign("again", Duration.ofSeconds(20));
    try {
      assertEquals(Status.Code.DEADLINE_EXCEEDED, assertThrows(TurnstileException.class,
          () -> patient.campaign("late", Duration.ofSeconds(3))).getCode());
      untilWaiters(name, 0);
    } finally {
      first.resign();
    }
  }

  @Test
  void acquireAllOfOverlappingSetsNeverDeadlocks() throws Exception {
    List<List<String>> sets = List.of(
        List.of("jlive/all/x", "jlive/all/y"),
        List.of("jlive/all/z", "jlive/all/y"),
        List.of("jlive/all/x", "jlive/all/z"),
        List.of("jlive/all/z", "jlive/all/x", "jlive/all/y"));
    Map<String, Integer> holders = new HashMap<>();
    ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();
    List<CompletableFuture<Void>> runs = new ArrayList<>();
    for (int i = 0; i < sets.size(); i++) {
      TurnstileClient c = i % 2 == 0 ? a : b;
      List<String> set = sets.get(i);
      runs.add(CompletableFuture.runAsync(() -> {
        for (int round = 0; round < 5; round++) {
          long t0 = System.nanoTime();
          MultiHold m;
          try {
            m = c.acquireAll(set, AcquireOptions.builder().waitTimeout(Duration.ofSeconds(15))
                .build());
          } catch (TurnstileException e) {
            errors.add(set + ": " + e.getMessage());
            return;
          }
          if (System.nanoTime() - t0 > TimeUnit.SECONDS.toNanos(17)) {
            errors.add(set + ": took past its deadline");
          }
          synchronized (holders) {
            for (String n : set) {
              if (holders.merge(n, 1, Integer::sum) > 1) {
                errors.add(n + " held twice");
              }
            }
          }
          try {
            Thread.sleep(20);  // the work done under the locks
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
          synchronized (holders) {
            for (String n : set) {
              holders.merge(n, -1, Integer::sum);
            }
          }
          m.release();
        }
      }, pool));
    }
    CompletableFuture.allOf(runs.toArray(new CompletableFuture[0])).get(50, TimeUnit.SECONDS);
    assertEquals(List.of(), new ArrayList<>(errors));
  }

  @Test
  void aFailedAcquireAllLeavesNothingHeld() throws Exception {
    List<String> set = List.of("jlive/set/c", "jlive/set/a", "jlive/set/b");
    try (Hold h = a.acquire("jlive/set/b", AcquireOptions.builder().tryOnce().build())) {
      long t0 = System.nanoTime();
      TurnstileException e = assertThrows(TurnstileException.class, () -> b.acquireAll(set,
          AcquireOptions.builder().waitTimeout(Duration.ofSeconds(1)).build()));
      assertEquals(Status.Code.DEADLINE_EXCEEDED, e.getCode());
      assertTrue(e.getMessage().contains("jlive/set/b"), e.getMessage());
      assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(5));
      assertEquals(Status.Code.FAILED_PRECONDITION, assertThrows(TurnstileException.class,
          () -> b.acquireAll(set, AcquireOptions.builder().tryOnce().build())).getCode());
      assertTrue(a.describe("jlive/set/a").isEmpty(), "jlive/set/a left held");
      assertTrue(a.describe("jlive/set/c").isEmpty(), "jlive/set/c left held");
      LockDescription d = a.describe("jlive/set/b").get();
      assertEquals(1, d.holders().size());
      assertEquals(h.fencingToken(), d.holders().get(0).fencingToken());
      assertEquals(0, d.waiters().size());
    }
    // Whole: each its own token; losing one ends the set and frees the rest.
    BlockingQueue<String> lost = new LinkedBlockingQueue<>();
    MultiHold m = b.acquireAll(set, AcquireOptions.builder().tryOnce().build(),
        (s, n, reason) -> lost.add(n + " " + reason));
    Set<Long> tokens = new HashSet<>();
    for (String n : set) {
      assertEquals(m.fencingToken(n), a.describe(n).get().holders().get(0).fencingToken());
      tokens.add(m.fencingToken(n));
    }
    assertEquals(3, tokens.size());
    assertTrue(m.isHeld());
    assertTrue(a.release(m.hold("jlive/set/a").get().leaseId()));
    assertEquals("jlive/set/a DELETED", lost.poll(20, TimeUnit.SECONDS));
    assertTrue(m.awaitEnd(Duration.ofSeconds(1)));
    assertFalse(m.isHeld());
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    for (String n : set) {
      while (a.describe(n).isPresent()) {
        assertTrue(System.nanoTime() < deadline, n + " still held after the set broke");
        Thread.sleep(20);  // polling the server's view: no event to wait on
      }
    }
    m.release();
  }
}
