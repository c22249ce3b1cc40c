package io.turnstile.client;

import io.grpc.Status;
import java.time.Duration;
import java.util.Optional;

/**
 * A distributed lock in the style of Curator's InterProcessMutex and
 * java.util.concurrent.locks.Lock: {@link #acquire()} blocks until held,
 * {@link #acquire(Duration)} returns false when the lock could not be taken
 * in time, {@link #release()} lets go. One hold at a time per instance (not
 * re-entrant); use one instance per thread, or {@link TurnstileClient#acquire}
 * for holds of your own. The options' kind makes it a read lock (SHARED) or
 * a semaphore permit (SEMAPHORE).
 */
public final class TurnstileMutex {
  /** How long {@link #acquire()} waits: the replicas' default --max-wait-timeout. */
  public static final Duration FOREVER = Duration.ofHours(1);

  private final TurnstileClient client;
  private final String name;
  private final AcquireOptions options;
  private Hold hold;

  TurnstileMutex(TurnstileClient client, String name, AcquireOptions options) {
    this.client = client;
    this.name = name;
    this.options = options;
  }

  /**
   * Blocks until the lock is held (up to {@link #FOREVER}); returns the hold.
   * Throws TurnstileException (e.g. DEADLINE_EXCEEDED) if it cannot be taken.
   */
  public synchronized Hold acquire() {
    requireFree();
    hold = client.acquire(name, options.toBuilder().waitTimeout(FOREVER).build());
    return hold;
  }

  /**
   * Waits up to {@code wait} (ZERO: try once): true if held, false if the
   * lock stayed taken (DEADLINE_EXCEEDED, or FAILED_PRECONDITION for a
   * try-once). Other failures throw TurnstileException.
   */
  public synchronized boolean acquire(Duration wait) {
    requireFree();
    try {
      hold = client.acquire(name, options.toBuilder().waitTimeout(wait).build());
      return true;
    } catch (TurnstileException e) {
      if (e.getCode() == Status.Code.DEADLINE_EXCEEDED
          || (wait.isZero() && e.getCode() == Status.Code.FAILED_PRECONDITION)) {
        return false;
      }
      throw e;
    }
  }

  /** Releases the hold; IllegalMonitorStateException if this mutex holds nothing. */
  public synchronized void release() {
    if (hold == null) {
      throw new IllegalMonitorStateException("this mutex does not hold " + name);
    }
    Hold h = hold;
    hold = null;
    h.release();
  }

  /** True while this instance's hold is certainly held. */
  public synchronized boolean isAcquiredInThisProcess() {
    return hold != null && hold.isHeld();
  }

  /** The current hold (for its fencing token, lease id, state). */
  public synchronized Optional<Hold> hold() {
    return Optional.ofNullable(hold);
  }

  private void requireFree() {
    if (hold != null && !hold.state().isTerminal()) {
      throw new IllegalStateException("this mutex already holds " + name
          + " (not re-entrant): release it first");
    }
  }
}
