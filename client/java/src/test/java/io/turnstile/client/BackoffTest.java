package io.turnstile.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.time.Duration;
import org.junit.jupiter.api.Test;

class BackoffTest {
  @Test
  void doublesFrom50msTo1s() {
    Backoff b = new Backoff();
    long[] want = {50, 100, 200, 400, 800, 1000, 1000};
    for (long w : want) {
      assertEquals(Duration.ofMillis(w), b.next());
    }
  }

  @Test
  void retriesOnlyUnavailableAndCancelledOfAWaitBeforeItsDeadline() {
    Duration d = Duration.ofMillis(50);
    long end = 1_000_000_000L;
    assertTrue(Backoff.shouldRetry(Status.Code.UNAVAILABLE, false, 0, d, end));
    assertTrue(Backoff.shouldRetry(Status.Code.CANCELLED, false, 0, d, end));
    assertFalse(Backoff.shouldRetry(Status.Code.FAILED_PRECONDITION, false, 0, d, end));
    assertFalse(Backoff.shouldRetry(Status.Code.DEADLINE_EXCEEDED, false, 0, d, end));
    assertFalse(Backoff.shouldRetry(Status.Code.INVALID_ARGUMENT, false, 0, d, end));
    // try-once is never retried
    assertFalse(Backoff.shouldRetry(Status.Code.UNAVAILABLE, true, 0, d, end));
    // a retry that would start at or after the wait deadline is not made
    assertFalse(Backoff.shouldRetry(Status.Code.UNAVAILABLE, false, end - d.toNanos(), d, end));
    assertTrue(Backoff.shouldRetry(Status.Code.UNAVAILABLE, false, end - d.toNanos() - 1, d, end));
  }
}
