package io.turnstile.client;

import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.OptionalLong;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import turnstile.v1.Lock.AcquireEvent;
import turnstile.v1.Lock.AcquireRelease;
import turnstile.v1.Lock.AcquireRequest;
import turnstile.v1.Lock.KeepAliveRequest;
import turnstile.v1.Lock.KeepAliveResponse;
import turnstile.v1.Lock.LeaseStatus;

/**
 * One Acquire stream: a held lock (or semaphore permit, or read hold), from
 * {@link TurnstileClient#acquire}. Held while the stream stays open; closing
 * it ({@link #close()}, try-with-resources) releases it.
 *
 * <p>The hold follows the careful-client rules of lock.proto: count on it
 * only while {@link #state()} is HELD, and at most until
 * {@link #validUntilNanos()} ({@link System#nanoTime()} clock); SUSPENDED
 * means in doubt (stop before {@link #safeUntilNanos()}); LOST and RELEASED
 * are final. With a ttl the lease is renewed with KeepAlive every ttl/3.
 * Thread-safe.
 */
public final class Hold implements AutoCloseable {
  private final TurnstileClient client;
  private final String name;
  private final AcquireOptions options;
  private final Executor callbacks;  // sequential, off gRPC's threads
  private final Ticker ticker;

  private final ReentrantLock mu = new ReentrantLock();
  private final Condition changed = mu.newCondition();
  private final Object sendMu = new Object();
  private ClientCallStreamObserver<AcquireRequest> requests;

  // guarded by mu
  private HoldState state = HoldState.WAITING;
  private boolean ended;
  private Status endStatus;
  private boolean releasing;
  private boolean halfClosed;
  private long position;
  private String leaseId;
  private long fencingToken;
  private Duration validFor;
  private Duration sessionTimeout;
  private String lostReason;
  private String lostMessage = "";
  private final Watchdog watchdog = new Watchdog();
  private ScheduledFuture<?> watchdogTask;
  private ScheduledFuture<?> keepAliveTask;
  private long leaseValidUntil;
  private boolean hasLeaseValidity;
  private boolean granted;  // the state listener was told of the grant

  Hold(TurnstileClient client, String name, AcquireOptions options, Executor callbacks,
       Ticker ticker) {
    this.client = client;
    this.name = name;
    this.options = options;
    this.callbacks = callbacks;
    this.ticker = ticker;
  }

  void start(AcquireRequest open) {
    client.asyncStub().acquire(new ClientResponseObserver<AcquireRequest, AcquireEvent>() {
      @Override
      public void beforeStart(ClientCallStreamObserver<AcquireRequest> r) {
        requests = r;
      }

      @Override
      public void onNext(AcquireEvent ev) {
        onEvent(ev);
      }

      @Override
      public void onError(Throwable t) {
        onEnd(Status.fromThrowable(t));
      }

      @Override
      public void onCompleted() {
        onEnd(Status.OK);
      }
    });
    send(open);
  }

  // -- public -------------------------------------------------------------

  /** The lock's name. */
  public String name() { return name; }

  /** The options it was acquired with. */
  public AcquireOptions options() { return options; }

  public HoldState state() {
    mu.lock();
    try {
      return state;
    } finally {
      mu.unlock();
    }
  }

  /** True while the lock is certainly held (state HELD). */
  public boolean isHeld() {
    return state() == HoldState.HELD;
  }

  /** Names the held contender node: for Release, KeepAlive, Revoke on any replica. */
  public String leaseId() {
    mu.lock();
    try {
      return leaseId;
    } finally {
      mu.unlock();
    }
  }

  /** The fencing token: pass it to the protected resource. */
  public long fencingToken() {
    mu.lock();
    try {
      return fencingToken;
    } finally {
      mu.unlock();
    }
  }

  /** The last queue position seen while waiting (0 if never queued). */
  public long position() {
    mu.lock();
    try {
      return position;
    } finally {
      mu.unlock();
    }
  }

  /** The lease's validity at grant (ttl > 0), else null. */
  public Duration validFor() {
    mu.lock();
    try {
      return validFor;
    } finally {
      mu.unlock();
    }
  }

  /** The replica's negotiated ZooKeeper session timeout. */
  public Duration sessionTimeout() {
    mu.lock();
    try {
      return sessionTimeout;
    } finally {
      mu.unlock();
    }
  }

  /**
   * Until when (System.nanoTime) the hold is certainly valid: safe_for of
   * the latest ACQUIRED/STILL_HELD, and for a TTL lease no longer than its
   * renewals allow. Empty if the server gives no such bound.
   */
  public OptionalLong validUntilNanos() {
    mu.lock();
    try {
      if (!watchdog.hasValidity() && !hasLeaseValidity) {
        return OptionalLong.empty();
      }
      long v = watchdog.hasValidity() ? watchdog.validUntilNanos() : leaseValidUntil;
      if (hasLeaseValidity && leaseValidUntil - v < 0) {
        v = leaseValidUntil;
      }
      return OptionalLong.of(v);
    } finally {
      mu.unlock();
    }
  }

  /** While SUSPENDED: until when (System.nanoTime) the hold is certainly safe. */
  public long safeUntilNanos() {
    mu.lock();
    try {
      return watchdog.safeUntilNanos();
    } finally {
      mu.unlock();
    }
  }

  /** Why it was LOST (SESSION_EXPIRED, LEASE_EXPIRED, DELETED, SHUTDOWN, CONNECTION, REFRESH_OVERDUE). */
  public String lostReason() {
    mu.lock();
    try {
      return lostReason;
    } finally {
      mu.unlock();
    }
  }

  public String lostMessage() {
    mu.lock();
    try {
      return lostMessage;
    } finally {
      mu.unlock();
    }
  }

  /**
   * Waits until the state differs from {@code from}, or the timeout passes;
   * returns the state then.
   */
  public HoldState awaitChange(HoldState from, Duration timeout) throws InterruptedException {
    long left = timeout.toNanos();
    mu.lock();
    try {
      while (state == from && left > 0) {
        left = changed.awaitNanos(left);
      }
      return state;
    } finally {
      mu.unlock();
    }
  }

  /** Waits until the state is one of {@code states}; false on timeout. */
  public boolean awaitState(Duration timeout, HoldState... states) throws InterruptedException {
    long left = timeout.toNanos();
    mu.lock();
    try {
      while (true) {
        for (HoldState s : states) {
          if (state == s) {
            return true;
          }
        }
        if (left <= 0) {
          return false;
        }
        left = changed.awaitNanos(left);
      }
    } finally {
      mu.unlock();
    }
  }

  /** {@link #release(Duration)} with 10 s. */
  public boolean release() {
    return release(Duration.ofSeconds(10));
  }

  /**
   * Releases the lock and waits up to {@code timeout} for RELEASED; if it
   * does not come, cancels the stream (a live replica deletes the node at
   * once). Returns false if the hold was already lost, true otherwise.
   * Idempotent.
   */
  public boolean release(Duration timeout) {
    boolean already;
    mu.lock();
    try {
      if (state == HoldState.RELEASED) {
        return true;
      }
      if (state == HoldState.LOST || ended) {
        return false;
      }
      already = releasing;
      releasing = true;
      cancelTasksLocked();
    } finally {
      mu.unlock();
    }
    if (!already) {
      send(AcquireRequest.newBuilder().setRelease(AcquireRelease.getDefaultInstance()).build());
    }
    boolean done;
    try {
      done = awaitEnd(timeout);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      done = false;
    }
    if (!done) {
      cancel("release not confirmed within " + timeout);
    }
    halfClose();
    mu.lock();
    try {
      if (state == HoldState.HELD || state == HoldState.SUSPENDED || state == HoldState.WAITING) {
        setStateLocked(HoldState.RELEASED);
      }
      return state == HoldState.RELEASED;
    } finally {
      mu.unlock();
    }
  }

  /**
   * Replaces the hold's metadata (all of it) by its lease id and fencing
   * token, keeping the hold: {@link TurnstileClient#proclaim}.
   */
  public void proclaim(java.util.Map<String, String> metadata) {
    client.proclaim(leaseId(), fencingToken(), metadata);
  }

  /** Releases (try-with-resources). */
  @Override
  public void close() {
    release();
  }

  @Override
  public String toString() {
    mu.lock();
    try {
      return "Hold{name=" + name + ", state=" + state + ", fencingToken=" + fencingToken
          + ", leaseId=" + leaseId + "}";
    } finally {
      mu.unlock();
    }
  }

  // -- internals ----------------------------------------------------------

  private boolean awaitEnd(Duration timeout) throws InterruptedException {
    long left = timeout.toNanos();
    mu.lock();
    try {
      while (!(ended || state == HoldState.RELEASED || state == HoldState.LOST)) {
        if (left <= 0) {
          return false;
        }
        left = changed.awaitNanos(left);
      }
      return true;
    } finally {
      mu.unlock();
    }
  }

  /** Waits for the answer to the open: true when no longer WAITING (or ended). */
  boolean awaitAnswer(long deadlineNanos) throws InterruptedException {
    mu.lock();
    try {
      while (state == HoldState.WAITING && !ended) {
        long left = deadlineNanos - ticker.nanos();
        if (left <= 0) {
          return false;
        }
        changed.awaitNanos(left);
      }
      return true;
    } finally {
      mu.unlock();
    }
  }

  HoldState stateForAcquire() {
    return state();
  }

  Status endStatus() {
    mu.lock();
    try {
      return endStatus;
    } finally {
      mu.unlock();
    }
  }

  void send(AcquireRequest r) {
    synchronized (sendMu) {
      if (halfClosed) {
        return;
      }
      try {
        requests.onNext(r);
      } catch (RuntimeException e) {
        // the call is already over; onError reports it
      }
    }
  }

  void halfClose() {
    synchronized (sendMu) {
      if (halfClosed) {
        return;
      }
      halfClosed = true;
      try {
        requests.onCompleted();
      } catch (RuntimeException e) {
        // already over
      }
    }
  }

  void cancel(String why) {
    try {
      requests.cancel(why, null);
    } catch (RuntimeException e) {
      // already over
    }
  }

  private void setStateLocked(HoldState s) {
    HoldState old = state;
    state = s;
    changed.signalAll();
    HoldStateListener l = options.stateListener();
    if (old == s || s == HoldState.WAITING || l == null) {
      return;
    }
    String why = switch (s) {
      case HELD -> granted ? "RESUMED" : "ACQUIRED";
      case SUSPENDED -> watchdog.isSilent() ? "REFRESH_OVERDUE" : "SUSPENDED";
      case LOST -> lostReason;
      default -> "RELEASED";
    };
    if (s == HoldState.HELD) {
      granted = true;
    }
    execute(() -> l.stateChanged(this, s, why));
  }

  /** Runs a listener on the hold's sequential callback executor. */
  private void execute(Runnable r) {
    try {
      callbacks.execute(r);
    } catch (java.util.concurrent.RejectedExecutionException closed) {
      // the client is closed: nobody to tell
    }
  }

  private void cancelTasksLocked() {
    if (watchdogTask != null) {
      watchdogTask.cancel(false);
      watchdogTask = null;
    }
    if (keepAliveTask != null) {
      keepAliveTask.cancel(false);
      keepAliveTask = null;
    }
  }

  private static long nanos(com.google.protobuf.Duration d) {
    return d.getSeconds() * 1_000_000_000L + d.getNanos();
  }

  private static Duration duration(com.google.protobuf.Duration d) {
    return Duration.ofSeconds(d.getSeconds(), d.getNanos());
  }

  private void onEvent(AcquireEvent ev) {
    Runnable callback = null;
    boolean lostNow = false;
    boolean startKeepAlive = false;
    long now = ticker.nanos();
    mu.lock();
    try {
      switch (ev.getType()) {
        case QUEUED: {
          position = ev.getQueued().getPosition();
          QueuedListener l = options.queuedListener();
          long p = position;
          if (l != null) {
            callback = () -> l.queued(p);
          }
          break;
        }
        case ACQUIRED: {
          var a = ev.getAcquired();
          leaseId = a.getLeaseId();
          fencingToken = a.getFencingToken();
          validFor = a.hasValidFor() && nanos(a.getValidFor()) > 0 ? duration(a.getValidFor()) : null;
          sessionTimeout = duration(a.getSessionTimeout());
          if (validFor != null) {
            leaseValidUntil = now + validFor.toNanos();
            hasLeaseValidity = true;
          }
          watchdog.acquired(now, nanos(a.getSafeFor()),
              a.hasRefreshWithin() ? nanos(a.getRefreshWithin()) : 0);
          setStateLocked(HoldState.HELD);
          startKeepAlive = !options.ttl().isZero();
          break;
        }
        case STILL_HELD: {
          if (state == HoldState.HELD || state == HoldState.SUSPENDED) {
            if (watchdog.stillHeld(now, nanos(ev.getStillHeld().getSafeFor()),
                nanos(ev.getStillHeld().getRefreshWithin()))) {
              setStateLocked(HoldState.HELD);
            }
          }
          break;
        }
        case SUSPENDED: {
          if (state == HoldState.HELD || state == HoldState.SUSPENDED) {
            watchdog.suspended(now, nanos(ev.getSuspended().getSafeFor()));
            setStateLocked(HoldState.SUSPENDED);
          }
          break;
        }
        case RESUMED: {
          if (state == HoldState.HELD || state == HoldState.SUSPENDED) {
            if (ev.hasStillHeld()) {
              watchdog.resumed(now, nanos(ev.getStillHeld().getSafeFor()),
                  nanos(ev.getStillHeld().getRefreshWithin()));
            } else {
              watchdog.resumed(now, 0, -1);
            }
            setStateLocked(HoldState.HELD);
          }
          break;
        }
        case LOST: {
          if (!state.isTerminal()) {
            lostReason = ev.getLost().getReason().name();
            lostMessage = ev.getLost().getMessage();
            setStateLocked(HoldState.LOST);
            lostNow = true;
          }
          break;
        }
        case RELEASED: {
          if (!state.isTerminal()) {
            setStateLocked(HoldState.RELEASED);
          }
          break;
        }
        case REVOKE_REQUESTED: {
          RevokeListener l = options.revokeListener();
          if (l != null && (state == HoldState.HELD || state == HoldState.SUSPENDED)) {
            String requester = ev.getRevokeRequested().getRequester();
            String reason = ev.getRevokeRequested().getReason();
            callback = () -> l.revokeRequested(this, requester, reason);
          }
          break;
        }
        default:
          break;  // RELEASING and unknown types: ignored
      }
      if (state.isTerminal()) {
        cancelTasksLocked();
      } else if (state != HoldState.WAITING && !releasing) {
        scheduleWatchdogLocked(now);
        if (startKeepAlive && keepAliveTask == null) {
          long interval = Math.max(options.ttl().toNanos() / 3, TimeUnit.MILLISECONDS.toNanos(100));
          keepAliveTask = client.scheduler().scheduleWithFixedDelay(
              this::renew, interval, interval, TimeUnit.NANOSECONDS);
        }
      }
    } finally {
      mu.unlock();
    }
    if (callback != null) {
      execute(callback);
    }
    if (lostNow) {
      notifyLost();
    }
  }

  private void scheduleWatchdogLocked(long now) {
    if (watchdogTask != null) {
      watchdogTask.cancel(false);
      watchdogTask = null;
    }
    OptionalLong next = watchdog.nextCheckNanos();
    if (next.isPresent()) {
      long delay = Math.max(next.getAsLong() - now, 0);
      watchdogTask = client.scheduler().schedule(this::checkWatchdog, delay, TimeUnit.NANOSECONDS);
    }
  }

  private void checkWatchdog() {
    boolean lose = false;
    mu.lock();
    try {
      if (state.isTerminal() || ended || releasing) {
        return;
      }
      long now = ticker.nanos();
      Watchdog.Action a = watchdog.check(now);
      if (a == Watchdog.Action.SUSPEND) {
        setStateLocked(HoldState.SUSPENDED);
      } else if (a == Watchdog.Action.LOSE) {
        lostReason = watchdog.lostReason();
        lostMessage = watchdog.isSilent()
            ? "no refresh from the replica before the hold's validity ran out"
            : "the replica's safe time ran out before its ZooKeeper connection came back";
        setStateLocked(HoldState.LOST);
        cancelTasksLocked();
        lose = true;
      }
      if (!lose) {
        scheduleWatchdogLocked(now);
      }
    } finally {
      mu.unlock();
    }
    if (lose) {
      cancel("hold lost: " + lostReason);  // a live replica deletes the node
      notifyLost();
    }
  }

  private void notifyLost() {
    LossListener l = options.lossListener();
    if (l != null) {
      String reason = lostReason();
      String message = lostMessage();
      execute(() -> l.lost(this, reason, message));
    }
  }

  private void onEnd(Status status) {
    boolean lostNow = false;
    mu.lock();
    try {
      ended = true;
      endStatus = status;
      if (state == HoldState.HELD || state == HoldState.SUSPENDED) {
        if (releasing) {
          setStateLocked(HoldState.RELEASED);
        } else {
          lostReason = "CONNECTION";
          lostMessage = status.getCode() + ": " + status.getDescription();
          setStateLocked(HoldState.LOST);
          lostNow = true;
        }
      }
      cancelTasksLocked();
      changed.signalAll();
    } finally {
      mu.unlock();
    }
    synchronized (sendMu) {
      halfClosed = true;  // nothing more can be sent
    }
    if (lostNow) {
      notifyLost();
    }
  }

  /** One KeepAlive of the lease (every ttl/3, on the client's scheduler). */
  private void renew() {
    String lease;
    long interval = Math.max(options.ttl().toNanos() / 3, TimeUnit.MILLISECONDS.toNanos(100));
    mu.lock();
    try {
      if (state.isTerminal() || ended || releasing || leaseId == null) {
        return;
      }
      lease = leaseId;
    } finally {
      mu.unlock();
    }
    long sent = ticker.nanos();
    StreamObserver<KeepAliveRequest> req = client.asyncStub()
        .withDeadlineAfter(Math.max(interval, TimeUnit.MILLISECONDS.toNanos(500)), TimeUnit.NANOSECONDS)
        .keepAlive(new StreamObserver<KeepAliveResponse>() {
          @Override
          public void onNext(KeepAliveResponse r) {
            for (LeaseStatus s : r.getLeasesList()) {
              if (!s.getLeaseId().equals(lease)) {
                continue;
              }
              mu.lock();
              try {
                if (s.getCode() == Status.Code.OK.value()) {
                  long until = sent + nanos(s.getValidFor());
                  if (!hasLeaseValidity || until - leaseValidUntil > 0) {
                    leaseValidUntil = until;
                    hasLeaseValidity = true;
                  }
                } else if (s.getCode() == Status.Code.NOT_FOUND.value()) {
                  // gone: the Acquire stream reports LOST; stop renewing
                  if (keepAliveTask != null) {
                    keepAliveTask.cancel(false);
                    keepAliveTask = null;
                  }
                }
              } finally {
                mu.unlock();
              }
            }
          }

          @Override
          public void onError(Throwable t) {
            // transient: the next interval tries again (the server says LOST if it expires)
          }

          @Override
          public void onCompleted() {}
        });
    try {
      req.onNext(KeepAliveRequest.newBuilder().addLeaseIds(lease).build());
      req.onCompleted();
    } catch (RuntimeException e) {
      // the next interval tries again
    }
  }
}
