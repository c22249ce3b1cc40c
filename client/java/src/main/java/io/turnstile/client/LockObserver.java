package io.turnstile.client;

/**
 * Receives an observed lock's states ({@link TurnstileClient#observe}), in
 * order, on a callback thread (never gRPC's).
 */
public interface LockObserver {
  void onState(LockState state);

  /**
   * The observation ended for good (INVALID_ARGUMENT, PERMISSION_DENIED, an
   * Observe the replica does not implement, ...): nothing follows.
   */
  default void onError(TurnstileException error) {}
}
