package io.turnstile.client;

/** The kind of a contender (lock.proto's LockKind). */
public enum LockKind {
  /** A writer / mutex: holds alone. */
  EXCLUSIVE,
  /** A reader: holds together with other shared holders, FIFO across kinds. */
  SHARED,
  /** One of an N-holder semaphore (N = {@link AcquireOptions#maxHolders()}). */
  SEMAPHORE
}
