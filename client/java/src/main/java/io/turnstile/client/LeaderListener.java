package io.turnstile.client;

/** Receives leader changes, in order, on a callback thread. */
public interface LeaderListener {
  void onLeader(LeaderEvent event);

  /** The observation ended for good (see {@link LockObserver#onError}). */
  default void onError(TurnstileException error) {}
}
