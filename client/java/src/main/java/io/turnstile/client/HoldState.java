package io.turnstile.client;

/** Where a {@link Hold} is. */
public enum HoldState {
  /** Waiting in the queue (only seen inside acquire). */
  WAITING,
  /** The lock is held. */
  HELD,
  /**
   * In doubt: the replica lost ZooKeeper (SUSPENDED) or the client's watchdog
   * heard nothing within refresh_within. Certainly safe only until
   * {@link Hold#safeUntilNanos()}; stop work that needs the lock before then.
   */
  SUSPENDED,
  /** Gone without being asked ({@link Hold#lostReason()}). Terminal. */
  LOST,
  /** Released on request. Terminal. */
  RELEASED;

  public boolean isTerminal() {
    return this == LOST || this == RELEASED;
  }
}
