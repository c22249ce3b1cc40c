package io.turnstile.client;

import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A set of locks taken all-or-nothing by {@link TurnstileClient#acquireAll}.
 * Each lock keeps its own {@link Hold} and fencing token. The set is intact
 * while every hold is HELD: the first hold that is lost or falls in doubt
 * (SUSPENDED) breaks the set; the {@link MultiLossListener} is told, and the
 * library releases all the others, so nothing of a broken set is kept.
 * {@link #release()} (or close, try-with-resources) releases them all.
 * Thread-safe.
 */
public final class MultiHold implements AutoCloseable {
  private final TurnstileClient client;
  private final List<String> names;  // canonical order
  private final MultiLossListener listener;
  private final CountDownLatch ended = new CountDownLatch(1);

  // guarded by this
  private final List<Hold> holds = new ArrayList<>();
  private String lostName;
  private String lostReason;
  private boolean released;      // released by us: later RELEASED states are ours
  private boolean complete;      // returned to the caller
  private Thread acquiring;      // the thread inside acquire, while it waits
  private boolean interrupted;   // we interrupted it

  private MultiHold(TurnstileClient client, List<String> names, MultiLossListener listener) {
    this.client = client;
    this.names = names;
    this.listener = listener;
  }

  static MultiHold acquire(TurnstileClient client, Collection<String> names,
                           AcquireOptions options, MultiLossListener listener) {
    List<String> sorted = TurnstileClient.canonicalOrder(names);
    if (options == null) {
      options = AcquireOptions.builder().build();
    }
    MultiHold m = new MultiHold(client, sorted, listener);
    long end = System.nanoTime() + options.waitTimeout().toNanos();
    HoldStateListener user = options.stateListener();
    for (int i = 0; i < sorted.size(); i++) {
      String n = sorted.get(i);
      Duration wait = Duration.ZERO;
      if (!options.tryOnce()) {
        wait = Duration.ofNanos(Math.max(end - System.nanoTime(), 1_000_000L));
      }
      AcquireOptions each = options.toBuilder().waitTimeout(wait).onStateChange((h, s, r) -> {
        if (user != null) {
          user.stateChanged(h, s, r);
        }
        m.member(n, s, r);
      }).build();
      Hold h = null;
      TurnstileException failure = null;
      boolean go;
      synchronized (m) {
        go = m.lostName == null;
        if (go) {
          m.acquiring = Thread.currentThread();
        }
      }
      if (go) {
        try {
          h = client.acquire(n, each);
        } catch (TurnstileException e) {
          failure = e;
        }
      }
      boolean broken;
      synchronized (m) {
        m.acquiring = null;
        if (h != null) {
          m.holds.add(h);
        }
        broken = m.lostName != null;
        if (m.interrupted) {
          m.interrupted = false;
          Thread.interrupted();  // ours, not the caller's
        }
      }
      if (!broken && failure == null) {
        continue;
      }
      m.releaseAll();
      if (broken) {
        throw new TurnstileException(Status.Code.ABORTED, "acquireAll: lock \"" + m.lostName
            + "\" " + m.lostReason + " before the set was complete; released the others");
      }
      throw new TurnstileException(failure.getCode(), "acquireAll: lock \"" + n + "\": "
          + failure.getDetails() + " (released the " + i + " taken before it)", failure);
    }
    synchronized (m) {
      m.complete = true;
    }
    return m;
  }

  /** A state change of one member's hold (on that hold's callback thread). */
  private void member(String name, HoldState state, String reason) {
    boolean tell;
    synchronized (this) {
      if (lostName != null || state == HoldState.HELD || (state == HoldState.RELEASED && released)) {
        return;
      }
      lostName = name;
      lostReason = (state == HoldState.SUSPENDED ? "in doubt (" : state == HoldState.LOST
          ? "lost (" : "released (") + reason + ")";
      if (acquiring != null) {
        interrupted = true;
        acquiring.interrupt();  // stop waiting for the next lock of a broken set
      }
      tell = complete && listener != null;
    }
    ended.countDown();
    if (tell) {
      listener.lost(this, name, reason);
    }
    client.runAsync(this::releaseAll);
  }

  private void releaseAll() {
    List<Hold> all;
    synchronized (this) {
      released = true;
      all = new ArrayList<>(holds);
    }
    for (int i = all.size() - 1; i >= 0; i--) {
      all.get(i).release();
    }
  }

  /** The names, in canonical order. */
  public List<String> names() {
    return names;
  }

  /** The holds, in canonical order. */
  public synchronized List<Hold> holds() {
    return List.copyOf(holds);
  }

  /** One name's hold; empty if the name is not in the set. */
  public synchronized Optional<Hold> hold(String name) {
    int i = names.indexOf(name);
    return i < 0 || i >= holds.size() ? Optional.empty() : Optional.of(holds.get(i));
  }

  /** One name's fencing token (0 if the name is not in the set). */
  public long fencingToken(String name) {
    return hold(name).map(Hold::fencingToken).orElse(0L);
  }

  /** True while the set is intact: every hold HELD, not released. */
  public boolean isHeld() {
    List<Hold> all;
    synchronized (this) {
      if (lostName != null || released) {
        return false;
      }
      all = new ArrayList<>(holds);
    }
    for (Hold h : all) {
      if (h.state() != HoldState.HELD) {
        return false;
      }
    }
    return true;
  }

  /** The lock that broke the set; empty while intact (or after a plain release). */
  public synchronized Optional<String> lostName() {
    return Optional.ofNullable(lostName);
  }

  /** How it broke ("lost (DELETED)", "in doubt (SUSPENDED)", ...); empty while intact. */
  public synchronized Optional<String> lostReason() {
    return Optional.ofNullable(lostReason);
  }

  /** Waits until the set ends (broken, or released); false on timeout. */
  public boolean awaitEnd(Duration timeout) throws InterruptedException {
    return ended.await(timeout.toNanos(), TimeUnit.NANOSECONDS);
  }

  /**
   * Releases every lock of the set (each waits up to 10 s for RELEASED).
   * Idempotent; also fine after the set broke.
   */
  public void release() {
    releaseAll();
    ended.countDown();
  }

  @Override
  public void close() {
    release();
  }
}
