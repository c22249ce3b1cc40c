package io.turnstile.client;

import io.grpc.Status;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A leader election on one lock name, as etcd's concurrency.Election and
 * Curator's LeaderLatch: the leader is the holder of the exclusive lock
 * {@code name}, its value the hold's metadata "value", its term the hold's
 * fencing token. One Election is one candidate: one campaign at a time.
 * Observers need no Election ({@link TurnstileClient#observeLeader},
 * {@link TurnstileClient#leader}).
 *
 * <pre>{@code
 * Election e = client.election("orders-leader", ElectionOptions.builder().owner("node-1")
 *     .onLeadership((leader, why) -> log.info("leader=" + leader + ": " + why)).build());
 * Leadership l = e.campaign("10.0.0.1:8080");   // blocks until elected
 * write(l.fencingToken(), ...);                  // while e.isLeader()
 * e.resign();
 * }</pre>
 *
 * <p>When someone asks the leader to let go (REVOKE_REQUESTED: a Revoke, or
 * a waiter's revokeHolders) the leader steps down by default: it resigns at
 * once, and the listener hears {@code (false, "stepped down: ...")};
 * {@link ElectionOptions.Builder#stayOnRevoke} keeps it. Thread-safe.
 */
public final class Election {
  /** The metadata key of the leader's value (lock.proto's convention). */
  public static final String VALUE_KEY = "value";

  private static final Pattern WAIT_CAP = Pattern.compile("wait_timeout\\b.*\\b0\\.\\.(\\d+)ms");

  private final TurnstileClient client;
  private final String name;
  private final ElectionOptions options;

  // guarded by this
  private boolean campaigning;
  private Hold hold;             // the latest term's hold
  private String value;
  private String stepDownWhy;

  Election(TurnstileClient client, String name, ElectionOptions options) {
    this.client = client;
    this.name = name;
    this.options = options;
  }

  public String name() {
    return name;
  }

  private Map<String, String> metadata(String v) {
    Map<String, String> md = new LinkedHashMap<>(options.metadata());
    md.put(VALUE_KEY, v);
    return md;
  }

  /** The replica's --max-wait-timeout named by its INVALID_ARGUMENT, or null. */
  static Duration replicaWaitCap(TurnstileException e) {
    if (e.getCode() != Status.Code.INVALID_ARGUMENT) {
      return null;
    }
    Matcher m = WAIT_CAP.matcher(e.getDetails());
    if (!m.find()) {
      return null;
    }
    try {
      long ms = Long.parseLong(m.group(1));
      return ms > 0 ? Duration.ofMillis(ms) : null;
    } catch (NumberFormatException tooLong) {
      return null;
    }
  }

  /** {@link #campaign(String, Duration)} without a deadline: until elected or interrupted. */
  public Leadership campaign(String value) {
    return campaign(value, null);
  }

  /**
   * Waits until this candidate is leader (an exclusive hold with metadata
   * {"value": value}) or {@code timeout} (null: none) passes. Invisibly it
   * queues again when a wait ends because the replica caps waits
   * (--max-wait-timeout: DEADLINE_EXCEEDED before our deadline, or the
   * INVALID_ARGUMENT naming the cap), and, with backoff, when the replica
   * refuses for now (RESOURCE_EXHAUSTED, UNAVAILABLE, CANCELLED); each new
   * wait joins the queue at its end. Throws TurnstileException:
   * DEADLINE_EXCEEDED (timeout), CANCELLED (interrupted), INVALID_ARGUMENT
   * (bad name or value: before any call), PERMISSION_DENIED,
   * FAILED_PRECONDITION (already campaigning or leader: resign first; or
   * the lock is a semaphore).
   */
  public Leadership campaign(String value, Duration timeout) {
    String bad = TurnstileClient.invalidName(name);
    if (bad != null) {
      throw new TurnstileException(Status.Code.INVALID_ARGUMENT, bad);
    }
    AcquireOptions base;
    try {
      base = AcquireOptions.builder().owner(options.owner()).metadata(metadata(value))
          .ttl(options.ttl()).lockDelay(options.lockDelay()).onStateChange(this::onHoldState)
          .onRevokeRequested(this::onRevoke).build();
    } catch (IllegalArgumentException | NullPointerException e) {
      throw new TurnstileException(Status.Code.INVALID_ARGUMENT, e.getMessage());
    }
    synchronized (this) {
      if (campaigning) {
        throw new TurnstileException(Status.Code.FAILED_PRECONDITION,
            "election " + name + ": a campaign is already running");
      }
      if (hold != null && !hold.state().isTerminal()) {
        throw new TurnstileException(Status.Code.FAILED_PRECONDITION,
            "election " + name + ": already leader (resign first)");
      }
      campaigning = true;
      hold = null;
      this.value = value;
      stepDownWhy = null;
    }
    try {
      return campaignLoop(value, base, timeout);
    } finally {
      synchronized (this) {
        campaigning = false;
      }
    }
  }

  private Leadership campaignLoop(String value, AcquireOptions base, Duration timeout) {
    long end = timeout == null ? 0 : System.nanoTime() + timeout.toNanos();
    Duration slice = options.campaignWait();
    Backoff backoff = new Backoff();
    while (true) {
      if (Thread.currentThread().isInterrupted()) {
        throw new TurnstileException(Status.Code.CANCELLED, "interrupted while campaigning for "
            + name);
      }
      long now = System.nanoTime();
      Duration wait = slice;
      if (timeout != null) {
        long left = end - now;
        if (left <= 0) {
          throw new TurnstileException(Status.Code.DEADLINE_EXCEEDED, "not elected leader of "
              + name + " within " + timeout);
        }
        wait = Duration.ofNanos(Math.min(left, slice.toNanos()));
      }
      if (wait.compareTo(Duration.ofMillis(1)) < 0) {
        wait = Duration.ofMillis(1);  // never a try-once
      }
      try {
        Hold h = client.acquire(name, base.toBuilder().waitTimeout(wait).build());
        synchronized (this) {
          hold = h;
        }
        return new Leadership(name, value, h.fencingToken(), h.leaseId(), h);
      } catch (TurnstileException e) {
        if (Thread.currentThread().isInterrupted()) {
          throw e;
        }
        switch (e.getCode()) {
          case DEADLINE_EXCEEDED:
            break;  // the replica's cap (or its silence) ended the wait, not ours
          case INVALID_ARGUMENT: {
            Duration cap = replicaWaitCap(e);
            if (cap == null || cap.compareTo(wait) >= 0) {
              throw e;
            }
            slice = cap;
            continue;
          }
          case RESOURCE_EXHAUSTED:
          case UNAVAILABLE:
          case CANCELLED:
          case ABORTED:
            break;
          default:
            throw e;
        }
      }
      // A wait that lasted long queues again at once; quick refusals back off.
      if (System.nanoTime() - now > 1_000_000_000L) {
        backoff = new Backoff();
        continue;
      }
      long delay = backoff.next().toNanos();
      if (timeout != null) {
        delay = Math.min(delay, Math.max(end - System.nanoTime(), 0));
      }
      try {
        Thread.sleep(delay / 1_000_000, (int) (delay % 1_000_000));  // backoff before queuing again
      } catch (InterruptedException ie) {
        Thread.currentThread().interrupt();
        throw new TurnstileException(Status.Code.CANCELLED, "interrupted while campaigning for "
            + name, ie);
      }
    }
  }

  private void onHoldState(Hold h, HoldState state, String reason) {
    if (state == HoldState.HELD && "ACQUIRED".equals(reason)) {
      synchronized (this) {
        if (campaigning && hold == null) {
          hold = h;  // so that isLeader() agrees with the listener at once
        }
      }
    }
    LeadershipListener l = options.leadershipListener();
    if (l == null) {
      return;
    }
    switch (state) {
      case HELD:
        l.leadershipChanged(true, "ACQUIRED".equals(reason) ? "elected" : "resumed");
        break;
      case SUSPENDED:
        l.leadershipChanged(false, "REFRESH_OVERDUE".equals(reason)
            ? "in doubt: no refresh from the replica within refresh_within"
            : "suspended: the replica lost its ZooKeeper connection");
        break;
      case LOST:
        l.leadershipChanged(false, "lost: " + reason + ": " + h.lostMessage());
        break;
      case RELEASED: {
        String why;
        synchronized (this) {
          why = stepDownWhy;
        }
        l.leadershipChanged(false, why == null ? "resigned" : why);
        break;
      }
      default:
        break;
    }
  }

  private void onRevoke(Hold h, String requester, String reason) {
    if (options.stayOnRevoke()) {
      RevokeListener l = options.revokeListener();
      if (l != null) {
        l.revokeRequested(h, requester, reason);
      }
      return;
    }
    client.runAsync(() -> stepDown("stepped down: revoke requested by " + requester + ": "
        + reason));
  }

  /** True only while this candidate's hold is granted and not in doubt. */
  public boolean isLeader() {
    Hold h;
    synchronized (this) {
      h = hold;
    }
    return h != null && h.state() == HoldState.HELD;
  }

  /** The current (or last) term; empty before the first. */
  public synchronized Optional<Leadership> leadership() {
    if (hold == null) {
      return Optional.empty();
    }
    return Optional.of(new Leadership(name, value, hold.fencingToken(), hold.leaseId(), hold));
  }

  /**
   * Changes the leader's value without an election (Proclaim by the term's
   * lease id and fencing token). Throws TurnstileException:
   * FAILED_PRECONDITION when no campaign was won (or the replica finds the
   * token stale), NOT_FOUND when the term is over (lost or resigned),
   * INVALID_ARGUMENT, PERMISSION_DENIED, UNAVAILABLE.
   */
  public void proclaim(String newValue) {
    Hold h;
    synchronized (this) {
      h = hold;
    }
    if (h == null) {
      throw new TurnstileException(Status.Code.FAILED_PRECONDITION,
          "election " + name + ": not leader (no campaign won)");
    }
    h.proclaim(metadata(newValue));
    synchronized (this) {
      if (hold == h) {
        value = newValue;
      }
    }
  }

  /**
   * Gives up leadership (releases the hold), so the next candidate is
   * elected at once. Does nothing when this candidate is not leader.
   */
  public void resign() {
    stepDown("resigned");
  }

  private void stepDown(String why) {
    Hold h;
    synchronized (this) {
      h = hold;
      if (h == null || h.state().isTerminal()) {
        return;
      }
      if (stepDownWhy == null) {
        stepDownWhy = why;
      }
    }
    h.release();
  }

  /** Observes this election's leader ({@link TurnstileClient#observeLeader}). */
  public Observation observe(LeaderListener listener) {
    return client.observeLeader(name, listener);
  }
}
