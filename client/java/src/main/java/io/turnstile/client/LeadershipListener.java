package io.turnstile.client;

/**
 * Told when this candidate becomes leader ({@code true}, "elected"), is
 * leader again after an in-doubt period ({@code true}, "resumed"), and, as
 * soon as the library knows, when it may not be leader any more
 * ({@code false}: "suspended: ..." the replica lost ZooKeeper, "in doubt:
 * ..." the replica fell silent, "lost: REASON", "resigned", "stepped down:
 * revoke requested by ..."). {@code false} may come twice in a row (in
 * doubt, then lost). Called in order on a callback thread.
 */
@FunctionalInterface
public interface LeadershipListener {
  void leadershipChanged(boolean isLeader, String reason);
}
