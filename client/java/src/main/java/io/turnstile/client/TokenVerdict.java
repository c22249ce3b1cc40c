package io.turnstile.client;

/** CheckToken's answer about one fencing token (lock.proto's CheckTokenResponse.Verdict). */
public enum TokenVerdict {
  /** A hold of the lock with this token exists (for a shared lock or a semaphore: one of its holders). */
  CURRENT,
  /**
   * No hold has this token (released, lost, expired, or never existed): the lock's current or a
   * later holder has a higher one. A superseded token never becomes current again.
   */
  SUPERSEDED,
  /** The token names a contender that still waits and was never granted (no client is handed one). */
  WAITING
}
