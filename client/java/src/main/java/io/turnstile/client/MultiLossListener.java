package io.turnstile.client;

/**
 * Told once when a {@link MultiHold} breaks: the lock {@code name} was lost
 * or fell in doubt ({@code reason}: SUSPENDED, REFRESH_OVERDUE, or a LOST
 * reason). The library then releases the set's other locks. Called on a
 * callback thread.
 */
@FunctionalInterface
public interface MultiLossListener {
  void lost(MultiHold set, String name, String reason);
}
