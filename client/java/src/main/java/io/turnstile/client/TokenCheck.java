package io.turnstile.client;

/**
 * CheckToken's answer: the verdict; the highest fencing token among the lock's holders when the
 * replica read it (0 if it had none); linearizable, false when {@code allowStale} let the replica
 * skip ZooKeeper's sync. Accept a write only when {@link #isCurrent()}.
 */
public record TokenCheck(TokenVerdict verdict, long highestHolderToken, boolean linearizable) {
  /** True for {@link TokenVerdict#CURRENT}. */
  public boolean isCurrent() {
    return verdict == TokenVerdict.CURRENT;
  }
}
