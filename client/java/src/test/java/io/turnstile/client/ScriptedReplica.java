package io.turnstile.client;

import io.grpc.Server;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import turnstile.v1.Lock.AcquireEvent;
import turnstile.v1.Lock.AcquireOpen;
import turnstile.v1.Lock.AcquireRequest;
import turnstile.v1.Lock.Acquired;
import turnstile.v1.Lock.CheckTokenRequest;
import turnstile.v1.Lock.CheckTokenResponse;
import turnstile.v1.Lock.ObserveEvent;
import turnstile.v1.Lock.ObserveRequest;
import turnstile.v1.Lock.ProclaimRequest;
import turnstile.v1.Lock.ProclaimResponse;
import turnstile.v1.LockServiceGrpc;

/**
 * An in-process LockService whose Acquire, Observe, Proclaim and CheckToken
 * run the test's scripts, recording what the client asked (opens in order,
 * releases, proclaims, checks). A granted stream stays open until the client
 * releases it (RELEASED) or goes away; the test can push more events to it.
 */
final class ScriptedReplica implements AutoCloseable {
  /** Answers one Acquire open: grant(...) or out.onError(...). */
  interface AcquireScript {
    void open(int attempt, AcquireOpen open, Stream stream);
  }

  interface ObserveScript {
    void observe(int attempt, ServerCallStreamObserver<ObserveEvent> out);
  }

  interface ProclaimScript {
    Status proclaim(ProclaimRequest r);
  }

  /** Answers one CheckToken, or throws a StatusRuntimeException. */
  interface CheckTokenScript {
    CheckTokenResponse check(CheckTokenRequest r);
  }

  /** One Acquire stream, as the script sees it. */
  static final class Stream {
    final StreamObserver<AcquireEvent> out;
    final AcquireOpen open;
    volatile boolean over;

    Stream(StreamObserver<AcquireEvent> out, AcquireOpen open) {
      this.out = out;
      this.open = open;
    }

    synchronized void send(AcquireEvent ev) {
      if (!over) {
        out.onNext(ev);
      }
    }

    synchronized void fail(Status s) {
      if (!over) {
        over = true;
        out.onError(s.asRuntimeException());
      }
    }

    synchronized void end() {
      if (!over) {
        over = true;
        out.onCompleted();
      }
    }

    void grant(long token, long safeMs, long refreshMs) {
      send(AcquireEvent.newBuilder().setType(AcquireEvent.Type.ACQUIRED)
          .setAcquired(Acquired.newBuilder().setLeaseId("lease-" + open.getName())
              .setFencingToken(token).setSessionTimeout(ms(10_000)).setSafeFor(ms(safeMs))
              .setRefreshWithin(ms(refreshMs)))
          .build());
    }

    void grant(long token) {
      grant(token, 60_000, 60_000);
    }
  }

  static com.google.protobuf.Duration ms(long ms) {
    return TurnstileClient.proto(Duration.ofMillis(ms));
  }

  static AcquireEvent event(AcquireEvent.Type t) {
    return AcquireEvent.newBuilder().setType(t).build();
  }

  final List<AcquireOpen> opens = new CopyOnWriteArrayList<>();
  final List<String> released = new CopyOnWriteArrayList<>();
  final List<ProclaimRequest> proclaims = new CopyOnWriteArrayList<>();
  final List<CheckTokenRequest> checks = new CopyOnWriteArrayList<>();
  /** CheckToken's script (set it before the call). */
  volatile CheckTokenScript checkToken;
  final Map<String, Stream> streams = new ConcurrentHashMap<>();
  volatile int observes;
  private final Server server;
  final TurnstileClient client;

  ScriptedReplica(AcquireScript acquire, ObserveScript observe, ProclaimScript proclaim)
      throws Exception {
    String name = InProcessServerBuilder.generateName();
    server = InProcessServerBuilder.forName(name)
        .addService(new LockServiceGrpc.LockServiceImplBase() {
          @Override
          public StreamObserver<AcquireRequest> acquire(StreamObserver<AcquireEvent> out) {
            return new StreamObserver<AcquireRequest>() {
              Stream stream;

              @Override
              public void onNext(AcquireRequest r) {
                if (r.hasOpen()) {
                  opens.add(r.getOpen());
                  stream = new Stream(out, r.getOpen());
                  streams.put(r.getOpen().getName(), stream);
                  acquire.open(opens.size(), r.getOpen(), stream);
                } else if (r.hasRelease() && stream != null) {
                  released.add(stream.open.getName());
                  stream.send(event(AcquireEvent.Type.RELEASED));
                  stream.end();
                }
              }

              @Override
              public void onError(Throwable t) {
                if (stream != null) {
                  stream.over = true;
                }
              }

              @Override
              public void onCompleted() {
                if (stream != null) {
                  stream.end();
                }
              }
            };
          }

          @Override
          public void observe(ObserveRequest r, StreamObserver<ObserveEvent> out) {
            int n;
            synchronized (ScriptedReplica.this) {
              n = ++observes;
            }
            observe.observe(n, (ServerCallStreamObserver<ObserveEvent>) out);
          }

          @Override
          public void proclaim(ProclaimRequest r, StreamObserver<ProclaimResponse> out) {
            proclaims.add(r);
            Status s = proclaim.proclaim(r);
            if (s.isOk()) {
              out.onNext(ProclaimResponse.getDefaultInstance());
              out.onCompleted();
            } else {
              out.onError(s.asRuntimeException());
            }
          }

          @Override
          public void checkToken(CheckTokenRequest r, StreamObserver<CheckTokenResponse> out) {
            checks.add(r);
            CheckTokenResponse answer;
            try {
              answer = checkToken.check(r);
            } catch (StatusRuntimeException e) {
              out.onError(e);
              return;
            }
            out.onNext(answer);
            out.onCompleted();
          }
        }).build().start();
    client = TurnstileClient.builder("in-process").plaintext()
        .channel(InProcessChannelBuilder.forName(name).build()).build();
  }

  List<String> openNames() {
    List<String> out = new ArrayList<>();
    for (AcquireOpen o : opens) {
      out.add(o.getName());
    }
    return out;
  }

  @Override
  public void close() {
    client.close();
    server.shutdownNow();
  }
}
