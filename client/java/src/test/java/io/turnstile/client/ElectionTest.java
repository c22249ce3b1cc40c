package io.turnstile.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import turnstile.v1.Lock.AcquireEvent;
import turnstile.v1.Lock.Contender;
import turnstile.v1.Lock.Lost;
import turnstile.v1.Lock.ObserveEvent;
import turnstile.v1.Lock.RevokeRequested;
import turnstile.v1.Lock.Suspended;

/**
 * The election helpers against a scripted in-process replica: campaign
 * re-queueing, leadership callbacks, proclaim codes, observe re-connect.
 */
class ElectionTest {
  private ScriptedReplica replica;

  @AfterEach
  void stop() {
    if (replica != null) {
      replica.close();
    }
  }

  private static <T> T next(BlockingQueue<T> q, String what) throws InterruptedException {
    T v = q.poll(10, TimeUnit.SECONDS);
    assertNotNull(v, "no " + what + " within 10 s");
    return v;
  }

  @Test
  void campaignQueuesAgainUntilElected() throws Exception {
    replica = new ScriptedReplica((n, open, s) -> {
      switch (n) {
        case 1 -> s.fail(Status.RESOURCE_EXHAUSTED.withDescription("too many waiters"));
        case 2 -> s.fail(Status.UNAVAILABLE.withDescription("draining"));
        case 3 -> s.fail(Status.DEADLINE_EXCEEDED.withDescription("wait_timeout passed"));
        case 4 -> s.fail(Status.INVALID_ARGUMENT.withDescription(
            "wait_timeout is 20000ms; it must be 0..3000ms"));
        default -> s.grant(77);
      }
    }, null, null);
    BlockingQueue<String> calls = new LinkedBlockingQueue<>();
    Election e = replica.client.election("leader", ElectionOptions.builder().owner("node-1")
        .onLeadership((is, why) -> calls.add(is + " " + why)).build());
    Leadership l = e.campaign("10.0.0.1:80", Duration.ofSeconds(20));
    assertEquals(77, l.fencingToken());
    assertEquals("10.0.0.1:80", l.value());
    assertEquals("lease-leader", l.leaseId());
    assertTrue(e.isLeader());
    assertTrue(replica.opens.size() >= 5, "attempts " + replica.opens.size());
    var first = replica.opens.get(0);
    assertTrue(first.getWaitTimeout().getSeconds() >= 15, "the first wait is the time left");
    var last = replica.opens.get(replica.opens.size() - 1);
    assertEquals("10.0.0.1:80", last.getMetadataMap().get("value"));
    assertEquals("node-1", last.getOwner());
    assertTrue(last.getWaitTimeout().getSeconds() <= 3, "the replica's cap is learnt");
    assertEquals("true elected", next(calls, "elected"));
    TurnstileException again = assertThrows(TurnstileException.class, () -> e.campaign("x"));
    assertEquals(Status.Code.FAILED_PRECONDITION, again.getCode());
    e.resign();
    assertFalse(e.isLeader());
    assertEquals("false resigned", next(calls, "resigned"));
    assertEquals(List.of("leader"), replica.released);
  }

  @Test
  void campaignFailsOnlyForTheCallersReasons() throws Exception {
    replica = new ScriptedReplica((n, open, s) -> {
      switch (open.getName()) {
        case "denied" -> s.fail(Status.PERMISSION_DENIED.withDescription("policy"));
        case "capped" -> s.fail(Status.DEADLINE_EXCEEDED.withDescription("wait_timeout passed"));
        default -> s.fail(Status.INVALID_ARGUMENT.withDescription("metadata value too long"));
      }
    }, null, null);
    TurnstileClient c = replica.client;
    assertEquals(Status.Code.PERMISSION_DENIED, assertThrows(TurnstileException.class,
        () -> c.election("denied").campaign("v")).getCode());
    assertEquals(Status.Code.INVALID_ARGUMENT, assertThrows(TurnstileException.class,
        () -> c.election("other").campaign("v")).getCode());
    assertEquals(Status.Code.INVALID_ARGUMENT, assertThrows(TurnstileException.class,
        () -> c.election("x").campaign("v".repeat(257))).getCode());
    assertEquals(2, replica.opens.size(), "the long value is refused before any call");
    long t0 = System.nanoTime();
    TurnstileException late = assertThrows(TurnstileException.class,
        () -> c.election("capped").campaign("v", Duration.ofMillis(700)));
    long tookMs = (System.nanoTime() - t0) / 1_000_000;
    assertEquals(Status.Code.DEADLINE_EXCEEDED, late.getCode());
    assertTrue(tookMs >= 650 && tookMs < 5000, "took " + tookMs);
    assertTrue(replica.opens.size() >= 4, "queued again: " + replica.opens.size());
    Thread.currentThread().interrupt();
    TurnstileException cancelled = assertThrows(TurnstileException.class,
        () -> c.election("capped").campaign("v"));
    assertTrue(Thread.interrupted());
    assertEquals(Status.Code.CANCELLED, cancelled.getCode());
  }

  @Test
  void leadershipFollowsTheHold() throws Exception {
    replica = new ScriptedReplica((n, open, s) -> s.grant(5), null,
        r -> r.getFencingToken() == 5 ? Status.OK
            : Status.FAILED_PRECONDITION.withDescription("stale token"));
    BlockingQueue<String> calls = new LinkedBlockingQueue<>();
    Election e = replica.client.election("L", ElectionOptions.builder()
        .onLeadership((is, why) -> calls.add(is + " " + why)).build());
    assertFalse(e.isLeader());
    assertEquals(Status.Code.FAILED_PRECONDITION,
        assertThrows(TurnstileException.class, () -> e.proclaim("x")).getCode());
    e.campaign("v1");
    assertEquals("true elected", next(calls, "elected"));
    e.proclaim("v2");
    var p = replica.proclaims.get(0);
    assertEquals("lease-L", p.getLeaseId());
    assertEquals(5, p.getFencingToken());
    assertEquals(Map.of("value", "v2"), p.getMetadataMap());
    assertEquals("v2", e.leadership().get().value());
    assertEquals(Status.Code.FAILED_PRECONDITION, assertThrows(TurnstileException.class,
        () -> replica.client.proclaim("lease-L", 4, Map.of("value", "x"))).getCode());
    assertEquals(Status.Code.INVALID_ARGUMENT, assertThrows(TurnstileException.class,
        () -> replica.client.proclaim("lease-L", 5, Map.of("", "x"))).getCode());
    assertEquals(2, replica.proclaims.size(), "bad metadata is refused before the call");

    ScriptedReplica.Stream s = replica.streams.get("L");
    s.send(AcquireEvent.newBuilder().setType(AcquireEvent.Type.SUSPENDED)
        .setSuspended(Suspended.newBuilder().setSafeFor(ScriptedReplica.ms(60_000))).build());
    assertTrue(next(calls, "suspended").startsWith("false suspended"));
    assertFalse(e.isLeader());
    s.send(ScriptedReplica.event(AcquireEvent.Type.RESUMED));
    assertEquals("true resumed", next(calls, "resumed"));
    assertTrue(e.isLeader());
    // Asked to let go: the leader steps down by default.
    s.send(AcquireEvent.newBuilder().setType(AcquireEvent.Type.REVOKE_REQUESTED)
        .setRevokeRequested(RevokeRequested.newBuilder().setRequester("ops").setReason("maintenance"))
        .build());
    assertEquals("false stepped down: revoke requested by ops: maintenance", next(calls, "step down"));
    assertFalse(e.isLeader());
    assertEquals(List.of("L"), replica.released);

    // A second term, then LOST.
    e.campaign("v3");
    assertEquals("true elected", next(calls, "elected"));
    replica.streams.get("L").send(AcquireEvent.newBuilder().setType(AcquireEvent.Type.LOST)
        .setLost(Lost.newBuilder().setReason(Lost.Reason.DELETED).setMessage("released by id"))
        .build());
    assertTrue(next(calls, "lost").startsWith("false lost: DELETED"));
    assertFalse(e.isLeader());
    e.resign();  // nothing to do
  }

  @Test
  void leadershipIsInDoubtWhenTheReplicaFallsSilent() throws Exception {
    replica = new ScriptedReplica((n, open, s) -> s.grant(9, 600, 200), null, null);
    BlockingQueue<String> calls = new LinkedBlockingQueue<>();
    Election e = replica.client.election("L", ElectionOptions.builder()
        .onLeadership((is, why) -> calls.add(is + " " + why)).build());
    e.campaign("v");
    assertEquals("true elected", next(calls, "elected"));
    assertTrue(next(calls, "in doubt").startsWith("false in doubt"));
    assertFalse(e.isLeader());
    assertTrue(next(calls, "lost").startsWith("false lost: REFRESH_OVERDUE"));
  }

  @Test
  void stayOnRevokeKeepsLeadership() throws Exception {
    replica = new ScriptedReplica((n, open, s) -> s.grant(3), null, null);
    BlockingQueue<String> asked = new LinkedBlockingQueue<>();
    Election e = replica.client.election("L", ElectionOptions.builder()
        .stayOnRevoke((h, requester, reason) -> asked.add(requester)).build());
    e.campaign("v");
    replica.streams.get("L").send(AcquireEvent.newBuilder()
        .setType(AcquireEvent.Type.REVOKE_REQUESTED)
        .setRevokeRequested(RevokeRequested.newBuilder().setRequester("ops")).build());
    assertEquals("ops", next(asked, "revoke"));
    assertTrue(e.isLeader());
    assertEquals(List.of(), replica.released);
    e.resign();
  }

  private static ObserveEvent current(long seq, Contender... holders) {
    return ObserveEvent.newBuilder().setState(ObserveEvent.State.CURRENT).setName("L")
        .setSequence(seq).addAllHolders(List.of(holders)).build();
  }

  private static Contender leader(String owner, String value, long token) {
    return Contender.newBuilder().setOwner(owner).putMetadata("value", value)
        .setFencingToken(token).setPosition(1).build();
  }

  @Test
  void observeLeaderObservesAgainAfterUnavailable() throws Exception {
    replica = new ScriptedReplica(null, (n, out) -> {
      switch (n) {
        case 1 -> {
          out.onNext(current(1, leader("a", "va", 10)));
          out.onNext(current(2, leader("a", "va", 10)).toBuilder().setWaiters(3).build());
          out.onError(Status.UNAVAILABLE.withDescription("replica draining").asRuntimeException());
        }
        case 2 -> out.onError(Status.UNAVAILABLE.withDescription("still draining")
            .asRuntimeException());
        case 3 -> {
          out.onNext(ObserveEvent.newBuilder().setState(ObserveEvent.State.UNKNOWN).setName("L")
              .setSequence(1).setMessage("no ZooKeeper").build());
          out.onNext(current(2, leader("b", "vb", 12)));
          out.onNext(current(3));
        }
        default -> out.onError(Status.INTERNAL.asRuntimeException());
      }
    }, null);
    BlockingQueue<LeaderEvent> events = new LinkedBlockingQueue<>();
    Observation o = replica.client.observeLeader("L", events::add);
    LeaderEvent ev = next(events, "first");
    assertEquals("a", ev.leader().owner());
    assertEquals("va", ev.leader().value());
    assertEquals(10, ev.leader().fencingToken());
    ev = next(events, "unknown");
    assertTrue(ev.unknown());
    assertNull(ev.leader());
    assertTrue(ev.message().contains("draining"), ev.message());
    ev = next(events, "the new leader");  // the replica's own UNKNOWN is not repeated
    assertFalse(ev.unknown());
    assertEquals("b", ev.leader().owner());
    assertEquals("vb", ev.leader().value());
    ev = next(events, "no leader");
    assertFalse(ev.unknown());
    assertNull(ev.leader());
    o.close();
    assertFalse(o.isOpen());
    assertNull(events.poll(200, TimeUnit.MILLISECONDS));
    assertEquals(3, replica.observes);
  }

  @Test
  void leaderOnceAndObserveErrors() throws Exception {
    replica = new ScriptedReplica(null, (n, out) -> {
      switch (n) {
        case 1 -> {
          out.onNext(ObserveEvent.newBuilder().setState(ObserveEvent.State.UNKNOWN).setName("L")
              .build());
          out.onNext(current(2, leader("a", "va", 10)));
        }
        case 2 -> out.onNext(current(1));
        default -> out.onError(Status.PERMISSION_DENIED.withDescription("policy")
            .asRuntimeException());
      }
    }, null);
    TurnstileClient c = replica.client;
    assertEquals("va", c.leader("L").get().value());
    assertTrue(c.leader("L").isEmpty());
    assertEquals(Status.Code.PERMISSION_DENIED,
        assertThrows(TurnstileException.class, () -> c.leader("L")).getCode());
    BlockingQueue<TurnstileException> errors = new LinkedBlockingQueue<>();
    c.observeLeader("", new LeaderListener() {
      @Override
      public void onLeader(LeaderEvent e) {}

      @Override
      public void onError(TurnstileException e) {
        errors.add(e);
      }
    });
    assertEquals(Status.Code.INVALID_ARGUMENT, next(errors, "error").getCode());
    assertEquals(3, replica.observes);
  }
}
