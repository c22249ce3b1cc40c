package io.turnstile.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Server;
import io.grpc.Status;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import turnstile.v1.Lock.AcquireEvent;
import turnstile.v1.Lock.AcquireRequest;
import turnstile.v1.Lock.Acquired;
import turnstile.v1.Lock.KeepAliveRequest;
import turnstile.v1.Lock.KeepAliveResponse;
import turnstile.v1.Lock.LeaseStatus;
import turnstile.v1.Lock.RevokeRequested;
import turnstile.v1.LockServiceGrpc;

/**
 * The library against a scripted LockService on gRPC's in-process
 * transport (no replica, no ZooKeeper): watchdog, retry, codes, release,
 * listeners. Every wait has a deadline.
 */
class InProcessTest {
  private Server server;
  private TurnstileClient client;

  interface Script {
    void acquire(int attempt, StreamObserver<AcquireEvent> out, AcquireRequest open,
                 CountDownLatch cancelled);
  }

  private final AtomicInteger attempts = new AtomicInteger();
  private final CountDownLatch renewals = new CountDownLatch(3);
  private final CountDownLatch cancelled = new CountDownLatch(1);
  private final AtomicReference<AcquireRequest> lastOpen = new AtomicReference<>();

  private void start(Script script) throws Exception {
    String name = InProcessServerBuilder.generateName();
    server = InProcessServerBuilder.forName(name).directExecutor()
        .addService(new LockServiceGrpc.LockServiceImplBase() {
          @Override
          public StreamObserver<AcquireRequest> acquire(StreamObserver<AcquireEvent> out) {
            int n = attempts.incrementAndGet();
            return new StreamObserver<AcquireRequest>() {
              @Override
              public void onNext(AcquireRequest r) {
                if (r.hasOpen()) {
                  lastOpen.set(r);
                  script.acquire(n, out, r, cancelled);
                } else if (r.hasRelease()) {
                  out.onNext(AcquireEvent.newBuilder().setType(AcquireEvent.Type.RELEASED).build());
                  out.onCompleted();
                }
              }

              @Override
              public void onError(Throwable t) {
                cancelled.countDown();
              }

              @Override
              public void onCompleted() {}
            };
          }

          @Override
          public StreamObserver<KeepAliveRequest> keepAlive(StreamObserver<KeepAliveResponse> out) {
            return new StreamObserver<KeepAliveRequest>() {
              @Override
              public void onNext(KeepAliveRequest r) {
                KeepAliveResponse.Builder b = KeepAliveResponse.newBuilder();
                for (String id : r.getLeaseIdsList()) {
                  b.addLeases(LeaseStatus.newBuilder().setLeaseId(id).setCode(0)
                      .setValidFor(ms(600)));
                }
                out.onNext(b.build());
                renewals.countDown();
              }

              @Override
              public void onError(Throwable t) {}

              @Override
              public void onCompleted() {
                out.onCompleted();
              }
            };
          }
        }).build().start();
    client = TurnstileClient.builder("in-process").plaintext()
        .channel(InProcessChannelBuilder.forName(name).directExecutor().build()).build();
  }

  @AfterEach
  void stop() {
    if (client != null) {
      client.close();
    }
    if (server != null) {
      server.shutdownNow();
    }
  }

  static com.google.protobuf.Duration ms(long ms) {
    return TurnstileClient.proto(Duration.ofMillis(ms));
  }

  static void grant(StreamObserver<AcquireEvent> out, long token, long safeMs, long refreshMs) {
    out.onNext(AcquireEvent.newBuilder().setType(AcquireEvent.Type.ACQUIRED)
        .setAcquired(Acquired.newBuilder().setLeaseId("lease-" + token).setFencingToken(token)
            .setSessionTimeout(ms(4000)).setSafeFor(ms(safeMs)).setRefreshWithin(ms(refreshMs)))
        .build());
  }

  @Test
  void silentReplicaMakesTheHoldSuspendedThenLostAndCancelsTheStream() throws Exception {
    start((n, out, open, c) -> grant(out, 7, 400, 100));  // then silence
    AtomicReference<String> lostReason = new AtomicReference<>();
    CountDownLatch lost = new CountDownLatch(1);
    Hold h = client.acquire("L", AcquireOptions.builder()
        .onLost((hold, reason, msg) -> {
          lostReason.set(reason);
          lost.countDown();
        }).build());
    assertEquals(7, h.fencingToken());
    assertEquals("lease-7", h.leaseId());
    assertTrue(h.awaitState(Duration.ofSeconds(5), HoldState.SUSPENDED, HoldState.LOST));
    assertTrue(h.awaitState(Duration.ofSeconds(5), HoldState.LOST));
    assertEquals("REFRESH_OVERDUE", h.lostReason());
    assertTrue(lost.await(5, TimeUnit.SECONDS));
    assertEquals("REFRESH_OVERDUE", lostReason.get());
    assertTrue(cancelled.await(5, TimeUnit.SECONDS), "the stream was not cancelled");
    assertFalse(h.release());  // already lost
  }

  @Test
  void stillHeldKeepsTheHoldAndReleaseEndsIt() throws Exception {
    start((n, out, open, c) -> {
      grant(out, 9, 60_000, 60_000);
      out.onNext(AcquireEvent.newBuilder().setType(AcquireEvent.Type.REVOKE_REQUESTED)
          .setRevokeRequested(RevokeRequested.newBuilder().setRequester("ops").setReason("deploy"))
          .build());
    });
    CountDownLatch revoked = new CountDownLatch(1);
    AtomicReference<String> who = new AtomicReference<>();
    try (Hold h = client.acquire("L", AcquireOptions.builder().owner("me")
        .metadata("k", "v").onRevokeRequested((hold, requester, reason) -> {
          who.set(requester + "/" + reason);
          revoked.countDown();
        }).build())) {
      assertTrue(revoked.await(5, TimeUnit.SECONDS));
      assertEquals("ops/deploy", who.get());
      assertTrue(h.isHeld());
      assertEquals("me", lastOpen.get().getOpen().getOwner());
      assertEquals("v", lastOpen.get().getOpen().getMetadataMap().get("k"));
    }
  }

  @Test
  void unavailableIsRetriedWithBackoffUntilGranted() throws Exception {
    start((n, out, open, c) -> {
      if (n <= 2) {
        out.onError(Status.UNAVAILABLE.withDescription("draining").asRuntimeException());
      } else {
        grant(out, 11, 60_000, 60_000);
      }
    });
    long t0 = System.nanoTime();
    Hold h = client.acquire("L", AcquireOptions.builder().waitTimeout(Duration.ofSeconds(10))
        .build());
    long elapsedMs = (System.nanoTime() - t0) / 1_000_000;
    assertEquals(3, attempts.get());
    assertTrue(elapsedMs >= 150, "backoff 50 + 100 ms, took " + elapsedMs);
    assertTrue(h.isHeld());
    // the retry asks only for the wait that is left
    assertTrue(lastOpen.get().getOpen().getWaitTimeout().getSeconds() < 10);
    assertTrue(h.release());
    assertEquals(HoldState.RELEASED, h.state());
  }

  @Test
  void tryOnceIsNeverRetriedAndCodesArePassedOn() throws Exception {
    start((n, out, open, c) -> out.onError(Status.UNAVAILABLE.asRuntimeException()));
    TurnstileException e = assertThrows(TurnstileException.class,
        () -> client.acquire("L", AcquireOptions.builder().tryOnce().build()));
    assertEquals(Status.Code.UNAVAILABLE, e.getCode());
    assertEquals(1, attempts.get());
  }

  @Test
  void retryStopsAtTheWaitDeadline() throws Exception {
    start((n, out, open, c) -> out.onError(Status.UNAVAILABLE.asRuntimeException()));
    long t0 = System.nanoTime();
    TurnstileException e = assertThrows(TurnstileException.class,
        () -> client.acquire("L", AcquireOptions.builder().waitTimeout(Duration.ofMillis(400))
            .build()));
    long elapsedMs = (System.nanoTime() - t0) / 1_000_000;
    assertEquals(Status.Code.UNAVAILABLE, e.getCode());
    assertTrue(elapsedMs < 2_000, "took " + elapsedMs);
    assertTrue(attempts.get() >= 3 && attempts.get() <= 5, "attempts " + attempts.get());
  }

  @Test
  void refusalsCarryTheirCode() throws Exception {
    start((n, out, open, c) -> out.onError(
        Status.FAILED_PRECONDITION.withDescription("held").asRuntimeException()));
    TurnstileException e = assertThrows(TurnstileException.class,
        () -> client.acquire("L", AcquireOptions.builder().tryOnce().build()));
    assertEquals(Status.Code.FAILED_PRECONDITION, e.getCode());
    assertEquals("held", e.getDetails());
    TurnstileMutex m = client.mutex("L");
    assertFalse(m.acquire(Duration.ZERO));
    assertThrows(IllegalMonitorStateException.class, m::release);
  }

  @Test
  void aTtlLeaseIsRenewedWithKeepAlive() throws Exception {
    start((n, out, open, c) -> grant(out, 13, 60_000, 60_000));
    Hold h = client.acquire("L", AcquireOptions.builder().ttl(Duration.ofMillis(600)).build());
    assertEquals(600, lastOpen.get().getOpen().getTtl().getNanos() / 1_000_000);
    assertTrue(renewals.await(10, TimeUnit.SECONDS), "fewer than 3 KeepAlives in 10 s");
    assertTrue(h.validUntilNanos().isPresent());
    assertTrue(h.isHeld());
    assertTrue(h.release());
    // the keep-alive client also works on its own
    var st = client.keepAlive(java.util.List.of("lease-13"));
    assertEquals(Status.Code.OK, st.get(0).code());
    assertEquals(Duration.ofMillis(600), st.get(0).validFor());
  }
}
