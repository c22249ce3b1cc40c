package io.turnstile.client;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Every option of an Acquire (lock.proto's AcquireOpen), plus the
 * listeners. Immutable; made with {@link #builder()}. {@link Builder#build()}
 * checks the limits lock.proto fixes and throws IllegalArgumentException;
 * limits a replica's flags set (max wait, max ttl, max semaphore holders)
 * are checked by the replica (INVALID_ARGUMENT).
 */
public final class AcquireOptions {
  /** The default wait of {@link TurnstileClient#acquire(String, AcquireOptions)}. */
  public static final Duration DEFAULT_WAIT = Duration.ofSeconds(60);

  private final Duration waitTimeout;
  private final Duration ttl;
  private final String owner;
  private final Map<String, String> metadata;
  private final LockKind kind;
  private final int maxHolders;
  private final Duration lockDelay;
  private final boolean revokeHolders;
  private final String revokeReason;
  private final Duration grace;
  private final LossListener lossListener;
  private final RevokeListener revokeListener;
  private final QueuedListener queuedListener;
  private final HoldStateListener stateListener;

  private AcquireOptions(Builder b) {
    waitTimeout = b.waitTimeout;
    ttl = b.ttl;
    owner = b.owner;
    metadata = Collections.unmodifiableMap(new LinkedHashMap<>(b.metadata));
    kind = b.kind != null ? b.kind : (b.maxHolders > 0 ? LockKind.SEMAPHORE : LockKind.EXCLUSIVE);
    maxHolders = b.maxHolders;
    lockDelay = b.lockDelay;
    revokeHolders = b.revokeHolders;
    revokeReason = b.revokeReason;
    grace = b.grace;
    lossListener = b.lossListener;
    revokeListener = b.revokeListener;
    queuedListener = b.queuedListener;
    stateListener = b.stateListener;
  }

  public static Builder builder() {
    return new Builder();
  }

  /** A builder that starts from these options. */
  public Builder toBuilder() {
    Builder b = new Builder();
    b.waitTimeout = waitTimeout;
    b.ttl = ttl;
    b.owner = owner;
    b.metadata.putAll(metadata);
    b.kind = kind;
    b.maxHolders = maxHolders;
    b.lockDelay = lockDelay;
    b.revokeHolders = revokeHolders;
    b.revokeReason = revokeReason;
    b.grace = grace;
    b.lossListener = lossListener;
    b.revokeListener = revokeListener;
    b.queuedListener = queuedListener;
    b.stateListener = stateListener;
    return b;
  }

  public Duration waitTimeout() { return waitTimeout; }
  public boolean tryOnce() { return waitTimeout.isZero(); }
  public Duration ttl() { return ttl; }
  public String owner() { return owner; }
  public Map<String, String> metadata() { return metadata; }
  public LockKind kind() { return kind; }
  public int maxHolders() { return maxHolders; }
  public Duration lockDelay() { return lockDelay; }
  public boolean revokeHolders() { return revokeHolders; }
  public String revokeReason() { return revokeReason; }
  public Duration grace() { return grace; }
  public LossListener lossListener() { return lossListener; }
  public RevokeListener revokeListener() { return revokeListener; }
  public QueuedListener queuedListener() { return queuedListener; }
  public HoldStateListener stateListener() { return stateListener; }

  public static final class Builder {
    private Duration waitTimeout = DEFAULT_WAIT;
    private Duration ttl = Duration.ZERO;
    private String owner = "";
    private final Map<String, String> metadata = new LinkedHashMap<>();
    private LockKind kind;
    private int maxHolders;
    private Duration lockDelay = Duration.ZERO;
    private boolean revokeHolders;
    private String revokeReason = "";
    private Duration grace = Duration.ofSeconds(15);
    private LossListener lossListener;
    private RevokeListener revokeListener;
    private QueuedListener queuedListener;
    private HoldStateListener stateListener;

    private Builder() {}

    /** How long to wait for the lock; ZERO = try once (FAILED_PRECONDITION if held). */
    public Builder waitTimeout(Duration d) { waitTimeout = d; return this; }
    /** Try once: fail with FAILED_PRECONDITION if the lock is held. Never retried. */
    public Builder tryOnce() { waitTimeout = Duration.ZERO; return this; }
    /** Lease TTL (0 or at least 500 ms); the hold renews it with KeepAlive by itself. */
    public Builder ttl(Duration d) { ttl = d; return this; }
    /** Who is asking (shown by Describe), 0..128 bytes. */
    public Builder owner(String s) { owner = s; return this; }
    /** One metadata entry (at most 16; keys 1..64 bytes, values 0..256 bytes). */
    public Builder metadata(String key, String value) { metadata.put(key, value); return this; }
    public Builder metadata(Map<String, String> m) { metadata.putAll(m); return this; }
    public Builder kind(LockKind k) { kind = k; return this; }
    /** Shorthand for kind(SHARED). */
    public Builder shared() { kind = LockKind.SHARED; return this; }
    /** A semaphore of N holders: kind(SEMAPHORE) and maxHolders(n). */
    public Builder semaphore(int n) { kind = LockKind.SEMAPHORE; maxHolders = n; return this; }
    public Builder maxHolders(int n) { maxHolders = n; return this; }
    /** Lock-delay after an involuntary end of the hold, 0..60 s. */
    public Builder lockDelay(Duration d) { lockDelay = d; return this; }
    /** Once queued, ask the holders ahead to let go, with this reason (0..256 bytes). */
    public Builder revokeHolders(String reason) {
      revokeHolders = true;
      revokeReason = reason == null ? "" : reason;
      return this;
    }
    public Builder revokeHolders(boolean on) { revokeHolders = on; return this; }
    public Builder revokeReason(String reason) { revokeReason = reason; return this; }
    /** How long past the wait to wait for a silent server's answer (default 15 s). */
    public Builder grace(Duration d) { grace = d; return this; }
    public Builder onLost(LossListener l) { lossListener = l; return this; }
    public Builder onRevokeRequested(RevokeListener l) { revokeListener = l; return this; }
    public Builder onQueued(QueuedListener l) { queuedListener = l; return this; }
    /** Told of the grant and of every later state change (see HoldStateListener). */
    public Builder onStateChange(HoldStateListener l) { stateListener = l; return this; }

    public AcquireOptions build() {
      requireNonNegative("waitTimeout", waitTimeout);
      requireNonNegative("ttl", ttl);
      requireNonNegative("lockDelay", lockDelay);
      requireNonNegative("grace", grace);
      if (!ttl.isZero() && ttl.compareTo(Duration.ofMillis(500)) < 0) {
        throw new IllegalArgumentException("ttl must be 0 or at least 500ms, got " + ttl);
      }
      if (lockDelay.compareTo(Duration.ofSeconds(60)) > 0) {
        throw new IllegalArgumentException("lockDelay must be at most 60s, got " + lockDelay);
      }
      requireBytes("owner", owner, 0, 128);
      requireBytes("revokeReason", revokeReason, 0, 256);
      if (metadata.size() > 16) {
        throw new IllegalArgumentException("metadata has " + metadata.size()
            + " entries, at most 16");
      }
      for (Map.Entry<String, String> e : metadata.entrySet()) {
        requireBytes("metadata key", e.getKey(), 1, 64);
        requireBytes("metadata value of " + e.getKey(), e.getValue(), 0, 256);
      }
      if (maxHolders < 0) {
        throw new IllegalArgumentException("maxHolders must be at least 0, got " + maxHolders);
      }
      LockKind k = kind != null ? kind : (maxHolders > 0 ? LockKind.SEMAPHORE : LockKind.EXCLUSIVE);
      if (k == LockKind.SEMAPHORE) {
        if (maxHolders < 1) {
          throw new IllegalArgumentException("a SEMAPHORE needs maxHolders of at least 1");
        }
        if (!lockDelay.isZero() || revokeHolders) {
          throw new IllegalArgumentException(
              "lockDelay and revokeHolders are not supported for semaphores");
        }
      } else if (maxHolders != 0) {
        throw new IllegalArgumentException("maxHolders must be 0 for " + k + ", got " + maxHolders);
      }
      return new AcquireOptions(this);
    }

    private static void requireNonNegative(String what, Duration d) {
      if (d == null || d.isNegative()) {
        throw new IllegalArgumentException(what + " must be a duration of at least 0, got " + d);
      }
    }

    private static void requireBytes(String what, String s, int min, int max) {
      if (s == null) {
        throw new IllegalArgumentException(what + " must not be null");
      }
      int n = s.getBytes(StandardCharsets.UTF_8).length;
      if (n < min || n > max) {
        throw new IllegalArgumentException(what + " must be " + min + ".." + max
            + " bytes of UTF-8, got " + n);
      }
    }
  }
}
