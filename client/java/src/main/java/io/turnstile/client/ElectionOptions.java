package io.turnstile.client;

import java.time.Duration;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Options of an {@link Election}: the candidate's owner (shown to
 * observers), extra metadata kept next to "value", the hold's ttl and
 * lock-delay, the longest single wait a campaign asks a replica for, the
 * leadership listener, and what to do when asked to let go. Immutable.
 */
public final class ElectionOptions {
  /** The longest single wait of a campaign: the replicas' default --max-wait-timeout. */
  public static final Duration DEFAULT_CAMPAIGN_WAIT = Duration.ofHours(1);

  private final String owner;
  private final Map<String, String> metadata;
  private final Duration ttl;
  private final Duration lockDelay;
  private final Duration campaignWait;
  private final LeadershipListener leadershipListener;
  private final boolean stayOnRevoke;
  private final RevokeListener revokeListener;

  private ElectionOptions(Builder b) {
    owner = b.owner;
    metadata = Collections.unmodifiableMap(new LinkedHashMap<>(b.metadata));
    ttl = b.ttl;
    lockDelay = b.lockDelay;
    campaignWait = b.campaignWait;
    leadershipListener = b.leadershipListener;
    stayOnRevoke = b.stayOnRevoke;
    revokeListener = b.revokeListener;
  }

  public static Builder builder() {
    return new Builder();
  }

  public String owner() { return owner; }
  public Map<String, String> metadata() { return metadata; }
  public Duration ttl() { return ttl; }
  public Duration lockDelay() { return lockDelay; }
  public Duration campaignWait() { return campaignWait; }
  public LeadershipListener leadershipListener() { return leadershipListener; }
  public boolean stayOnRevoke() { return stayOnRevoke; }
  public RevokeListener revokeListener() { return revokeListener; }

  public static final class Builder {
    private String owner = "";
    private final Map<String, String> metadata = new LinkedHashMap<>();
    private Duration ttl = Duration.ZERO;
    private Duration lockDelay = Duration.ZERO;
    private Duration campaignWait = DEFAULT_CAMPAIGN_WAIT;
    private LeadershipListener leadershipListener;
    private boolean stayOnRevoke;
    private RevokeListener revokeListener;

    private Builder() {}

    /** Who the candidate is (shown by Describe and to observers), 0..128 bytes. */
    public Builder owner(String s) { owner = s; return this; }
    /** Metadata kept next to "value" on every campaign and proclaim. */
    public Builder metadata(String key, String value) { metadata.put(key, value); return this; }
    /** The leader's hold is a lease of this ttl, renewed by the library. */
    public Builder ttl(Duration d) { ttl = d; return this; }
    /** After an involuntary loss of leadership the next leader waits this long. */
    public Builder lockDelay(Duration d) { lockDelay = d; return this; }
    /**
     * Caps each single wait of a campaign (default 1 h). A replica whose
     * --max-wait-timeout is lower is learnt from its answer anyway.
     */
    public Builder campaignWait(Duration d) { campaignWait = d; return this; }
    public Builder onLeadership(LeadershipListener l) { leadershipListener = l; return this; }
    /**
     * Keep leadership when someone asks the leader to let go (Revoke, a
     * waiter's revokeHolders), telling {@code l} (may be null). By default
     * the leader steps down: it resigns at once and the next candidate is
     * elected.
     */
    public Builder stayOnRevoke(RevokeListener l) {
      stayOnRevoke = true;
      revokeListener = l;
      return this;
    }

    public ElectionOptions build() {
      if (campaignWait == null || campaignWait.isNegative() || campaignWait.isZero()) {
        throw new IllegalArgumentException("campaignWait must be above 0, got " + campaignWait);
      }
      // The hold's own limits (owner, metadata, ttl, lock-delay).
      AcquireOptions.builder().owner(owner).metadata(metadata).metadata(Election.VALUE_KEY, "")
          .ttl(ttl).lockDelay(lockDelay).build();
      return new ElectionOptions(this);
    }
  }
}
