package io.turnstile.client;

/**
 * The careful-client rules of lock.proto as a state machine over a monotonic
 * clock (nanoseconds), without threads, so that its timing is testable with
 * any clock. A {@link Hold} feeds it the stream's events and calls
 * {@link #check(long)} at {@link #nextCheckNanos()}:
 * <ul>
 *   <li>the hold is certainly valid until (time received + safe_for) of the
 *       latest ACQUIRED or STILL_HELD;</li>
 *   <li>nothing within refresh_within of the latest of them: SUSPENDED (in
 *       doubt, silent), and LOST (REFRESH_OVERDUE) once that validity ran
 *       out; a server SUSPENDED that outlives its safe_for is LOST
 *       (SESSION_EXPIRED);</li>
 *   <li>a STILL_HELD in time again means the hold was fine (resumed).</li>
 * </ul>
 * Not thread-safe: the Hold calls it under its own lock.
 */
public final class Watchdog {
  /** What {@link #check} decided. */
  public enum Action { NONE, SUSPEND, LOSE }

  private boolean suspended;
  private boolean silent;          // suspended by the watchdog, not by the server
  private boolean lost;
  private long refreshWithin;      // 0: the server does not refresh holds
  private long refreshDue;
  private long validUntil;
  private boolean hasValidUntil;
  private long safeUntil;
  private boolean hasSafeUntil;
  private String lostReason = "";

  private static long atLeastMillisecond(long nanos) {
    return Math.max(nanos, 1_000_000L);
  }

  /** ACQUIRED: safe_for and refresh_within (0 when the server sets none). */
  public void acquired(long now, long safeForNanos, long refreshWithinNanos) {
    if (refreshWithinNanos > 0) {
      refreshWithin = refreshWithinNanos;
      refreshDue = now + refreshWithin;
      validUntil = now + safeForNanos;
      hasValidUntil = true;
    }
  }

  /** STILL_HELD. Returns true when it ends a silent suspension (resumed). */
  public boolean stillHeld(long now, long safeForNanos, long refreshWithinNanos) {
    if (lost || refreshWithin <= 0) {
      return false;
    }
    refreshWithin = atLeastMillisecond(refreshWithinNanos);
    refreshDue = now + refreshWithin;
    validUntil = now + safeForNanos;
    hasValidUntil = true;
    if (suspended && silent) {
      suspended = false;
      silent = false;
      hasSafeUntil = false;
      return true;
    }
    return false;
  }

  /** The server's SUSPENDED with its safe_for. */
  public void suspended(long now, long safeForNanos) {
    if (lost) {
      return;
    }
    suspended = true;
    silent = false;
    safeUntil = now + safeForNanos;
    hasSafeUntil = true;
  }

  /** RESUMED; stillHeld may be absent (refreshWithinNanos &lt; 0). */
  public void resumed(long now, long safeForNanos, long refreshWithinNanos) {
    if (lost) {
      return;
    }
    suspended = false;
    silent = false;
    hasSafeUntil = false;
    if (refreshWithin > 0 && refreshWithinNanos >= 0) {
      refreshWithin = atLeastMillisecond(refreshWithinNanos);
      validUntil = now + safeForNanos;
      hasValidUntil = true;
    }
    refreshDue = now + refreshWithin;
  }

  /** Applies the rules at {@code now}; SUSPEND and LOSE are reported once. */
  public Action check(long now) {
    if (lost) {
      return Action.NONE;
    }
    if (!suspended) {
      if (refreshWithin > 0 && now - refreshDue >= 0) {
        suspended = true;
        silent = true;
        safeUntil = validUntil;
        hasSafeUntil = hasValidUntil;
        return Action.SUSPEND;
      }
      return Action.NONE;
    }
    long deadline = hasSafeUntil ? safeUntil : now;
    if (now - deadline >= 0) {
      lost = true;
      lostReason = silent ? "REFRESH_OVERDUE" : "SESSION_EXPIRED";
      return Action.LOSE;
    }
    return Action.NONE;
  }

  /** When {@link #check} next has something to decide; empty: nothing to watch. */
  public java.util.OptionalLong nextCheckNanos() {
    if (lost) {
      return java.util.OptionalLong.empty();
    }
    if (suspended) {
      return java.util.OptionalLong.of(hasSafeUntil ? safeUntil : Long.MIN_VALUE);
    }
    return refreshWithin > 0 ? java.util.OptionalLong.of(refreshDue)
                             : java.util.OptionalLong.empty();
  }

  public boolean isSuspended() {
    return suspended;
  }

  public boolean isSilent() {
    return silent;
  }

  public boolean isLost() {
    return lost;
  }

  /** REFRESH_OVERDUE or SESSION_EXPIRED once {@link #check} said LOSE. */
  public String lostReason() {
    return lostReason;
  }

  /** Until when the hold is certainly valid (nanos); false in hasValidity if unknown. */
  public long validUntilNanos() {
    return validUntil;
  }

  public boolean hasValidity() {
    return hasValidUntil;
  }

  /** While suspended: until when the hold is certainly safe. */
  public long safeUntilNanos() {
    return hasSafeUntil ? safeUntil : validUntil;
  }
}
