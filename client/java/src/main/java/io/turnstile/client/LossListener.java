package io.turnstile.client;

/**
 * Told when a hold ends without being asked: reason is SESSION_EXPIRED,
 * LEASE_EXPIRED, DELETED, SHUTDOWN (from the replica), CONNECTION (the stream
 * broke) or REFRESH_OVERDUE (the client's watchdog heard nothing before the
 * hold's validity ran out). Called on a callback thread, never on gRPC's.
 */
@FunctionalInterface
public interface LossListener {
  void lost(Hold hold, String reason, String message);
}
