package io.turnstile.client;

/**
 * Told of a hold's grant and of every later change of its state, in order,
 * on the hold's callback thread (never gRPC's): HELD with reason ACQUIRED
 * (the grant) or RESUMED (after an in-doubt period); SUSPENDED with reason
 * SUSPENDED (the replica lost ZooKeeper) or REFRESH_OVERDUE (the client's
 * watchdog heard nothing in time); LOST with the loss's reason; RELEASED.
 */
@FunctionalInterface
public interface HoldStateListener {
  void stateChanged(Hold hold, HoldState state, String reason);
}
