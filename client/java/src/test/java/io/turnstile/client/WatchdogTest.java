package io.turnstile.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The careful-client rules, driven by an injected clock (milliseconds as nanos). */
class WatchdogTest {
  static final long MS = 1_000_000L;

  @Test
  void silencePastRefreshWithinSuspendsThenLosesWhenValidityRunsOut() {
    Watchdog w = new Watchdog();
    long t0 = 5_000 * MS;
    w.acquired(t0, 2_000 * MS, 600 * MS);  // safe for 2 s, next refresh within 0.6 s
    assertEquals(t0 + 600 * MS, w.nextCheckNanos().getAsLong());
    assertEquals(Watchdog.Action.NONE, w.check(t0 + 599 * MS));
    assertEquals(Watchdog.Action.SUSPEND, w.check(t0 + 600 * MS));
    assertTrue(w.isSuspended());
    assertTrue(w.isSilent());
    // in doubt until the validity of the last ACQUIRED runs out
    assertEquals(t0 + 2_000 * MS, w.nextCheckNanos().getAsLong());
    assertEquals(Watchdog.Action.NONE, w.check(t0 + 1_999 * MS));
    assertEquals(Watchdog.Action.LOSE, w.check(t0 + 2_000 * MS));
    assertEquals("REFRESH_OVERDUE", w.lostReason());
    assertFalse(w.nextCheckNanos().isPresent());
    assertEquals(Watchdog.Action.NONE, w.check(t0 + 9_000 * MS));  // reported once
  }

  @Test
  void stillHeldInTimeKeepsTheHoldAndResumesASilentSuspension() {
    Watchdog w = new Watchdog();
    w.acquired(0, 2_000 * MS, 600 * MS);
    assertFalse(w.stillHeld(500 * MS, 2_000 * MS, 600 * MS));
    assertEquals(Watchdog.Action.NONE, w.check(1_000 * MS));  // due at 1100 now
    assertEquals(1_100 * MS, w.nextCheckNanos().getAsLong());
    assertEquals(Watchdog.Action.SUSPEND, w.check(1_100 * MS));
    assertTrue(w.stillHeld(1_500 * MS, 2_000 * MS, 600 * MS));  // late but before validity: fine
    assertFalse(w.isSuspended());
    assertEquals(3_500 * MS, w.validUntilNanos());
    assertEquals(Watchdog.Action.NONE, w.check(2_000 * MS));
  }

  @Test
  void serverSuspendedLosesWithSessionExpiredAfterItsSafeTime() {
    Watchdog w = new Watchdog();
    w.acquired(0, 2_000 * MS, 600 * MS);
    w.suspended(300 * MS, 1_000 * MS);
    assertTrue(w.isSuspended());
    assertFalse(w.isSilent());
    assertEquals(1_300 * MS, w.nextCheckNanos().getAsLong());
    assertEquals(Watchdog.Action.NONE, w.check(1_299 * MS));
    assertEquals(Watchdog.Action.LOSE, w.check(1_300 * MS));
    assertEquals("SESSION_EXPIRED", w.lostReason());
  }

  @Test
  void resumedRestartsTheRefreshClock() {
    Watchdog w = new Watchdog();
    w.acquired(0, 2_000 * MS, 600 * MS);
    w.suspended(300 * MS, 1_000 * MS);
    w.resumed(800 * MS, 2_000 * MS, 600 * MS);
    assertFalse(w.isSuspended());
    assertEquals(1_400 * MS, w.nextCheckNanos().getAsLong());
    assertEquals(Watchdog.Action.NONE, w.check(1_300 * MS));
    assertEquals(Watchdog.Action.SUSPEND, w.check(1_400 * MS));
  }

  @Test
  void withoutRefreshWithinNothingIsWatched() {
    Watchdog w = new Watchdog();
    w.acquired(0, 0, 0);  // an older server
    assertFalse(w.nextCheckNanos().isPresent());
    assertEquals(Watchdog.Action.NONE, w.check(1_000_000 * MS));
  }

  @Test
  void worksAcrossNegativeAndWrappingClockValues() {
    Watchdog w = new Watchdog();
    long t0 = Long.MAX_VALUE - 100 * MS;  // nanoTime may wrap: compare by differences
    w.acquired(t0, 2_000 * MS, 600 * MS);
    assertEquals(Watchdog.Action.NONE, w.check(t0 + 599 * MS));
    assertEquals(Watchdog.Action.SUSPEND, w.check(t0 + 600 * MS));
    assertEquals(Watchdog.Action.LOSE, w.check(t0 + 2_000 * MS));
  }
}
