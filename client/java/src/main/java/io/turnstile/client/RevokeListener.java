package io.turnstile.client;

/**
 * Told when someone asks this holder to let go (Revoke by lease id, or a
 * waiter's revokeHolders), as Curator's RevocationListener. The holder decides:
 * usually it calls {@link Hold#release()}. Called on a callback thread.
 */
@FunctionalInterface
public interface RevokeListener {
  void revokeRequested(Hold hold, String requester, String reason);
}
