package io.turnstile.client;

import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import turnstile.v1.Lock.ObserveEvent;
import turnstile.v1.Lock.ObserveRequest;

/**
 * A running observation of one lock ({@link TurnstileClient#observe}): an
 * Observe stream that is opened again, through the client's target and
 * with backoff (50 ms doubling to 1 s), whenever it fails with UNAVAILABLE
 * (the replica drains), RESOURCE_EXHAUSTED or CANCELLED (a replica shutting
 * down); before that the observer is told the state is unknown. It stops on
 * {@link #close()} or on any other failure ({@link LockObserver#onError}).
 * Thread-safe.
 */
public final class Observation implements AutoCloseable {
  private final TurnstileClient client;
  private final String name;
  private final LockObserver observer;
  private final Executor callbacks;  // sequential

  private final Object mu = new Object();
  // guarded by mu
  private boolean closed;
  private ClientCallStreamObserver<ObserveRequest> call;
  private ScheduledFuture<?> retry;
  private boolean delivered;     // the current stream gave a state
  private boolean unknownSent;   // the last state told was unknown
  private Backoff backoff = new Backoff();

  Observation(TurnstileClient client, String name, LockObserver observer, Executor callbacks) {
    this.client = client;
    this.name = name;
    this.observer = observer;
    this.callbacks = callbacks;
  }

  /** The observed lock's name. */
  public String name() {
    return name;
  }

  /** Whether it still runs (not closed, no final error). */
  public boolean isOpen() {
    synchronized (mu) {
      return !closed;
    }
  }

  static boolean reobservable(Status.Code code) {
    return code == Status.Code.OK || code == Status.Code.UNAVAILABLE
        || code == Status.Code.RESOURCE_EXHAUSTED || code == Status.Code.CANCELLED;
  }

  void start() {
    String bad = TurnstileClient.invalidName(name);
    if (bad != null) {
      synchronized (mu) {
        closed = true;
      }
      TurnstileException e = new TurnstileException(Status.Code.INVALID_ARGUMENT, bad);
      run(() -> observer.onError(e));
      return;
    }
    open();
  }

  private void open() {
    ClientResponseObserver<ObserveRequest, ObserveEvent> responses =
        new ClientResponseObserver<>() {
          @Override
          public void beforeStart(ClientCallStreamObserver<ObserveRequest> r) {
            synchronized (mu) {
              call = r;
            }
          }

          @Override
          public void onNext(ObserveEvent ev) {
            onEvent(ev);
          }

          @Override
          public void onError(Throwable t) {
            ended(Status.fromThrowable(t));
          }

          @Override
          public void onCompleted() {
            ended(Status.OK);
          }
        };
    synchronized (mu) {
      if (closed) {
        return;
      }
      delivered = false;
      retry = null;
    }
    client.asyncStub().observe(ObserveRequest.newBuilder().setName(name).build(), responses);
    synchronized (mu) {
      if (closed && call != null) {
        call.cancel("observation closed", null);
      }
    }
  }

  private void onEvent(ObserveEvent ev) {
    LockState s;
    switch (ev.getState()) {
      case CURRENT: {
        List<Contender> holders = new ArrayList<>();
        for (var c : ev.getHoldersList()) {
          holders.add(TurnstileClient.contender(c));
        }
        s = new LockState(ev.getName().isEmpty() ? name : ev.getName(), false,
            List.copyOf(holders), ev.getWaiters(), ev.getMaxHolders(), ev.getSequence(),
            ev.getMessage());
        break;
      }
      case UNKNOWN:
        s = new LockState(ev.getName().isEmpty() ? name : ev.getName(), true, List.of(), 0,
            ev.getMaxHolders(), ev.getSequence(), ev.getMessage());
        break;
      default:
        return;  // a state this library does not know: ignored
    }
    synchronized (mu) {
      if (closed) {
        return;
      }
      delivered = true;
      unknownSent = s.unknown();
    }
    run(() -> {
      if (isOpen()) {
        observer.onState(s);
      }
    });
  }

  private void ended(Status status) {
    LockState unknown = null;
    synchronized (mu) {
      call = null;
      if (closed) {
        return;
      }
      if (!reobservable(status.getCode())) {
        closed = true;
        TurnstileException e = TurnstileException.from(status);
        run(() -> observer.onError(e));
        return;
      }
      if (!unknownSent) {
        unknownSent = true;
        String why = status.isOk() ? "the Observe stream ended"
            : "the Observe stream ended (" + status.getCode() + ": " + status.getDescription() + ")";
        unknown = new LockState(name, true, List.of(), 0, 0, 0, why + "; observing again");
      }
      if (delivered) {
        backoff = new Backoff();
      }
      Duration delay = backoff.next();
      try {
        retry = client.scheduler().schedule(this::open, delay.toNanos(), TimeUnit.NANOSECONDS);
      } catch (RejectedExecutionException clientClosed) {
        closed = true;
        return;
      }
    }
    if (unknown != null) {
      LockState u = unknown;
      run(() -> {
        if (isOpen()) {
          observer.onState(u);
        }
      });
    }
  }

  private void run(Runnable r) {
    try {
      callbacks.execute(r);
    } catch (RejectedExecutionException clientClosed) {
      // nobody to tell
    }
  }

  /** Stops observing (cancels the stream). Idempotent. */
  @Override
  public void close() {
    ClientCallStreamObserver<ObserveRequest> c;
    synchronized (mu) {
      closed = true;
      c = call;
      call = null;
      if (retry != null) {
        retry.cancel(false);
        retry = null;
      }
    }
    if (c != null) {
      try {
        c.cancel("observation closed", null);
      } catch (RuntimeException e) {
        // already over
      }
    }
  }
}
