package io.turnstile.client;

import java.util.Optional;

/**
 * A change of an election's leader ({@link TurnstileClient#observeLeader}):
 * the leader, or none ({@code leader} null), or unknown ({@code unknown}:
 * the replica has no ZooKeeper connection, or the library observes again
 * after the stream broke; {@code message} says why).
 */
public record LeaderEvent(Leader leader, boolean unknown, String message) {
  public Optional<Leader> leaderOpt() {
    return Optional.ofNullable(leader);
  }
}
