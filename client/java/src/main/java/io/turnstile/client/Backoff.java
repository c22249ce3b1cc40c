package io.turnstile.client;

import io.grpc.Status;
import java.time.Duration;

/**
 * The retry policy of an acquire: a wait that ends UNAVAILABLE (the replica
 * drains, lost ZooKeeper or cannot be reached) or CANCELLED (a replica that
 * shuts down cancels its calls) is opened again after 50 ms, doubling to 1 s,
 * until the wait deadline. A try-once (wait 0) is never retried.
 */
public final class Backoff {
  public static final Duration INITIAL = Duration.ofMillis(50);
  public static final Duration MAX = Duration.ofSeconds(1);

  private long nextNanos = INITIAL.toNanos();

  /** The delay before the next attempt; doubles (up to MAX) each call. */
  public Duration next() {
    long d = nextNanos;
    nextNanos = Math.min(nextNanos * 2, MAX.toNanos());
    return Duration.ofNanos(d);
  }

  /** Whether a status code is retried. */
  public static boolean retryable(Status.Code code) {
    return code == Status.Code.UNAVAILABLE || code == Status.Code.CANCELLED;
  }

  /**
   * Whether an attempt that failed with {@code code} is retried after
   * {@code delay}: retryable code, a wait (not try-once), and the retry would
   * start before the wait deadline {@code endNanos}.
   */
  public static boolean shouldRetry(Status.Code code, boolean tryOnce, long nowNanos,
                                    Duration delay, long endNanos) {
    return retryable(code) && !tryOnce && nowNanos + delay.toNanos() < endNanos;
  }
}
