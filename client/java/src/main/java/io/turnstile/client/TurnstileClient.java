package io.turnstile.client;

import com.google.common.util.concurrent.MoreExecutors;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.GrpcSslContexts;
import io.grpc.netty.NegotiationType;
import io.grpc.netty.NettyChannelBuilder;
import io.netty.handler.ssl.SslContext;
import io.netty.handler.ssl.SslContextBuilder;
import java.io.File;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import turnstile.v1.LockServiceGrpc;
import turnstile.v1.Lock.AcquireOpen;
import turnstile.v1.Lock.AcquireRequest;
import turnstile.v1.Lock.DescribeRequest;
import turnstile.v1.Lock.DescribeResponse;
import turnstile.v1.Lock.KeepAliveRequest;
import turnstile.v1.Lock.KeepAliveResponse;
import turnstile.v1.Lock.ListRequest;
import turnstile.v1.Lock.ListResponse;
import turnstile.v1.Lock.ReleaseRequest;
import turnstile.v1.Lock.RevokeRequest;

/**
 * A connection to turnstile replicas (turnstile.v1.LockService).
 *
 * <pre>{@code
 * try (TurnstileClient client = TurnstileClient.connect("127.0.0.1:7400");
 *      Hold hold = client.acquire("orders", AcquireOptions.builder().owner("me").build())) {
 *   use(hold.fencingToken());   // pass it to the protected resource
 * }                              // released here
 * }</pre>
 *
 * <p>The target is {@code host:port}, or {@code ipv4:A:P,B:Q} for several
 * replicas. TLS: {@link Builder#tls}, or by default the CLI's variables
 * TURNSTILE_TLS_CA_FILE (the CAs the replica's certificate chains to),
 * TURNSTILE_TLS_CERT_FILE and TURNSTILE_TLS_KEY_FILE (a client certificate:
 * mutual TLS); unset: plaintext. Every failure is a
 * {@link TurnstileException} carrying the gRPC status code. Thread-safe.
 */
public final class TurnstileClient implements AutoCloseable {
  private final String target;
  private final ManagedChannel channel;
  private final LockServiceGrpc.LockServiceStub async;
  private final LockServiceGrpc.LockServiceBlockingStub blocking;
  private final Duration timeout;
  private final boolean retryUnavailable;
  private final Ticker ticker;
  private final ScheduledExecutorService scheduler;
  private final ExecutorService callbackPool;

  private TurnstileClient(Builder b) {
    Ipv4NameResolverProvider.register();
    this.target = b.target;
    this.timeout = b.timeout;
    this.retryUnavailable = b.retryUnavailable;
    this.ticker = b.ticker;
    this.channel = b.channel != null ? b.channel : channel(b);
    this.async = LockServiceGrpc.newStub(channel);
    this.blocking = LockServiceGrpc.newBlockingStub(channel);
    ThreadFactory daemon = daemonThreads("turnstile-timer");
    ScheduledThreadPoolExecutor s = new ScheduledThreadPoolExecutor(1, daemon);
    s.setRemoveOnCancelPolicy(true);
    this.scheduler = s;
    this.callbackPool = Executors.newCachedThreadPool(daemonThreads("turnstile-callback"));
  }

  private static ManagedChannel channel(Builder b) {
    NettyChannelBuilder cb = NettyChannelBuilder.forTarget(b.target);
    String ca = b.caFile;
    String cert = b.certFile;
    String key = b.keyFile;
    if (ca == null && cert == null && key == null && b.tlsFromEnv) {
      ca = emptyToNull(System.getenv("TURNSTILE_TLS_CA_FILE"));
      cert = emptyToNull(System.getenv("TURNSTILE_TLS_CERT_FILE"));
      key = emptyToNull(System.getenv("TURNSTILE_TLS_KEY_FILE"));
    }
    if ((cert == null) != (key == null)) {
      throw new IllegalArgumentException("the TLS certificate and key files go together");
    }
    if (ca == null) {
      if (cert != null) {
        throw new IllegalArgumentException(
            "a client certificate needs a CA file (it is only sent over TLS)");
      }
      cb.usePlaintext();
    } else {
      try {
        File caF = new File(ca);
        File certF = cert == null ? null : new File(cert);
        File keyF = key == null ? null : new File(key);
        SslContext ctx;
        try {
          SslContextBuilder ssl = GrpcSslContexts.forClient().trustManager(caF);
          if (certF != null) {
            ssl.keyManager(certF, keyF);
          }
          ctx = ssl.build();
        } catch (UnsupportedOperationException | IllegalArgumentException noAlpn) {
          // Debian's netty: no JDK ALPN negotiator, no tcnative; see TurnstileJdkAlpn
          ctx = io.netty.handler.ssl.TurnstileJdkAlpn.forClient(caF, certF, keyF);
        }
        cb.sslContext(ctx).negotiationType(NegotiationType.TLS);
      } catch (Exception e) {
        throw new IllegalArgumentException("cannot use the TLS files (" + ca + ", " + cert
            + ", " + key + "): " + e.getMessage(), e);
      }
    }
    return cb.build();
  }

  private static String emptyToNull(String s) {
    return s == null || s.isEmpty() ? null : s;
  }

  private static ThreadFactory daemonThreads(String prefix) {
    AtomicInteger n = new AtomicInteger();
    return r -> {
      Thread t = new Thread(r, prefix + "-" + n.incrementAndGet());
      t.setDaemon(true);
      return t;
    };
  }

  /** A client of {@code target} with the defaults (TLS from the environment). */
  public static TurnstileClient connect(String target) {
    return builder(target).build();
  }

  public static Builder builder(String target) {
    return new Builder(target);
  }

  public String target() {
    return target;
  }

  LockServiceGrpc.LockServiceStub asyncStub() {
    return async;
  }

  ScheduledExecutorService scheduler() {
    return scheduler;
  }

  /** A Curator-style mutex (or read lock, or semaphore permit) on {@code name}. */
  public TurnstileMutex mutex(String name, AcquireOptions options) {
    return new TurnstileMutex(this, name, options);
  }

  public TurnstileMutex mutex(String name) {
    return new TurnstileMutex(this, name, AcquireOptions.builder().build());
  }

  /** {@link #acquire(String, AcquireOptions)} with the default options (wait 60 s). */
  public Hold acquire(String name) {
    return acquire(name, AcquireOptions.builder().build());
  }

  /**
   * Takes the lock {@code name}, waiting up to the options' waitTimeout
   * (ZERO: try once). Returns the held {@link Hold}, or throws
   * {@link TurnstileException} with the code the wait ended with:
   * FAILED_PRECONDITION (try-once on a held lock, or a semaphore of another
   * N), DEADLINE_EXCEEDED (the wait timed out), INVALID_ARGUMENT, ...
   * UNAVAILABLE and CANCELLED (a replica that drains or cannot be reached)
   * are retried with backoff (50 ms doubling to 1 s) until the wait
   * deadline; each retry joins the queue again at its end.
   */
  public Hold acquire(String name, AcquireOptions options) {
    long start = ticker.nanos();
    long end = start + options.waitTimeout().toNanos();
    Backoff backoff = new Backoff();
    Duration wait = options.waitTimeout();
    while (true) {
      try {
        return acquireOnce(name, options, wait);
      } catch (TurnstileException e) {
        Duration delay = backoff.next();
        if (!retryUnavailable || Thread.currentThread().isInterrupted()
            || !Backoff.shouldRetry(e.getCode(), options.tryOnce(), ticker.nanos(), delay, end)) {
          throw e;
        }
        try {
          Thread.sleep(delay.toMillis());  // the retry's backoff, bounded by the wait deadline
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          throw new TurnstileException(Status.Code.CANCELLED, "interrupted", ie);
        }
        wait = Duration.ofNanos(Math.max(end - ticker.nanos(), 1_000_000L));
      }
    }
  }

  private Hold acquireOnce(String name, AcquireOptions o, Duration wait) {
    if (name == null) {
      throw new IllegalArgumentException("the lock name must not be null");
    }
    AcquireOpen.Builder open = AcquireOpen.newBuilder()
        .setName(name)
        .setOwner(o.owner())
        .putAllMetadata(o.metadata())
        .setWaitTimeout(proto(wait))
        .setTtl(proto(o.ttl()))
        .setKind(switch (o.kind()) {
          case SHARED -> turnstile.v1.Lock.LockKind.LOCK_KIND_SHARED;
          case SEMAPHORE -> turnstile.v1.Lock.LockKind.LOCK_KIND_SEMAPHORE;
          default -> turnstile.v1.Lock.LockKind.LOCK_KIND_EXCLUSIVE;
        })
        .setMaxHolders(o.maxHolders())
        .setRevokeHolders(o.revokeHolders())
        .setRevokeReason(o.revokeReason())
        .setLockDelay(proto(o.lockDelay()));
    Executor callbacks = MoreExecutors.newSequentialExecutor(callbackPool);
    Hold hold = new Hold(this, name, o, callbacks, ticker);
    hold.start(AcquireRequest.newBuilder().setOpen(open).build());
    long deadline = ticker.nanos() + wait.toNanos() + o.grace().toNanos();
    boolean answered;
    try {
      answered = hold.awaitAnswer(deadline);
    } catch (InterruptedException e) {
      hold.cancel("interrupted");
      Thread.currentThread().interrupt();
      throw new TurnstileException(Status.Code.CANCELLED, "interrupted while waiting for " + name, e);
    }
    HoldState state = hold.state();
    if (state != HoldState.WAITING) {
      if (o.queuedListener() != null) {
        // the queue events' calls come before acquire returns
        CountDownLatch barrier = new CountDownLatch(1);
        callbacks.execute(barrier::countDown);
        try {
          barrier.await(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      return hold;  // held (or, rarely, already lost again: see hold.state())
    }
    hold.cancel("acquire abandoned");
    hold.halfClose();
    if (!answered) {
      throw new TurnstileException(Status.Code.DEADLINE_EXCEEDED, "no answer from " + target
          + " within " + wait.plus(o.grace()));
    }
    Status s = hold.endStatus();
    if (s == null || s.isOk()) {
      throw new TurnstileException(Status.Code.UNKNOWN, "Acquire stream ended without ACQUIRED");
    }
    throw TurnstileException.from(s);
  }

  static com.google.protobuf.Duration proto(Duration d) {
    return com.google.protobuf.Duration.newBuilder().setSeconds(d.getSeconds())
        .setNanos(d.getNano()).build();
  }

  private static Instant instant(com.google.protobuf.Timestamp t) {
    return Instant.ofEpochSecond(t.getSeconds(), t.getNanos());
  }

  private LockServiceGrpc.LockServiceBlockingStub unary() {
    return blocking.withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS);
  }

  /**
   * Releases a lease by id (any replica). True if released, false if it was
   * already gone (NOT_FOUND). The holder's stream gets LOST (DELETED).
   */
  public boolean release(String leaseId) {
    try {
      unary().release(ReleaseRequest.newBuilder().setLeaseId(leaseId).build());
      return true;
    } catch (StatusRuntimeException e) {
      if (e.getStatus().getCode() == Status.Code.NOT_FOUND) {
        return false;
      }
      throw TurnstileException.from(e);
    }
  }

  /**
   * Asks the holder of a lease to let go (any replica); it decides. True if
   * asked, false if the lease is gone (NOT_FOUND).
   */
  public boolean revoke(String leaseId, String requester, String reason) {
    try {
      unary().revoke(RevokeRequest.newBuilder().setLeaseId(leaseId).setRequester(requester)
          .setReason(reason).build());
      return true;
    } catch (StatusRuntimeException e) {
      if (e.getStatus().getCode() == Status.Code.NOT_FOUND) {
        return false;
      }
      throw TurnstileException.from(e);
    }
  }

  /** Holders and waiters of {@code name}; empty if nobody holds or waits for it. */
  public Optional<LockDescription> describe(String name) {
    DescribeResponse r;
    try {
      r = unary().describe(DescribeRequest.newBuilder().setName(name).build());
    } catch (StatusRuntimeException e) {
      if (e.getStatus().getCode() == Status.Code.NOT_FOUND) {
        return Optional.empty();
      }
      throw TurnstileException.from(e);
    }
    List<Contender> holders = new ArrayList<>();
    for (var c : r.getHoldersList()) {
      holders.add(contender(c));
    }
    List<Contender> waiters = new ArrayList<>();
    for (var c : r.getWaitersList()) {
      waiters.add(contender(c));
    }
    return Optional.of(new LockDescription(r.getName(), List.copyOf(holders), List.copyOf(waiters),
        r.getMaxHolders(), r.hasDelayedUntil() ? instant(r.getDelayedUntil()) : null));
  }

  private static Contender contender(turnstile.v1.Lock.Contender c) {
    LockKind kind = switch (c.getKind()) {
      case LOCK_KIND_SHARED -> LockKind.SHARED;
      case LOCK_KIND_SEMAPHORE -> LockKind.SEMAPHORE;
      default -> LockKind.EXCLUSIVE;
    };
    return new Contender(c.getOwner(), java.util.Map.copyOf(c.getMetadataMap()),
        c.hasSince() ? instant(c.getSince()) : null, c.getFencingToken(), c.getReplicaId(),
        c.getPosition(), kind, c.getRevokeRequests(), c.getRevokeRequester(), c.getRevokeReason(),
        c.getIdentity(), c.getMaxHolders(), c.hasGranted() ? instant(c.getGranted()) : null);
  }

  /** Names of locks with holders or waiters, in byte order (limit 0 = server default). */
  public LockList list(String prefix, int limit) {
    try {
      ListResponse r = unary().list(ListRequest.newBuilder().setPrefix(prefix).setLimit(limit)
          .build());
      return new LockList(List.copyOf(r.getNamesList()), r.getTruncated());
    } catch (StatusRuntimeException e) {
      throw TurnstileException.from(e);
    }
  }

  public LockList list(String prefix) {
    return list(prefix, 0);
  }

  /** Renews leases (opened with a ttl) once; one answer per id, in order. */
  public List<LeaseRenewal> keepAlive(List<String> leaseIds) {
    java.util.concurrent.CompletableFuture<KeepAliveResponse> f =
        new java.util.concurrent.CompletableFuture<>();
    var req = async.withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS).keepAlive(
        new io.grpc.stub.StreamObserver<KeepAliveResponse>() {
          @Override
          public void onNext(KeepAliveResponse r) {
            f.complete(r);
          }

          @Override
          public void onError(Throwable t) {
            f.completeExceptionally(t);
          }

          @Override
          public void onCompleted() {
            f.completeExceptionally(new TurnstileException(Status.Code.UNKNOWN,
                "KeepAlive ended without a response"));
          }
        });
    req.onNext(KeepAliveRequest.newBuilder().addAllLeaseIds(leaseIds).build());
    req.onCompleted();
    KeepAliveResponse r;
    try {
      r = f.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new TurnstileException(Status.Code.CANCELLED, "interrupted", e);
    } catch (java.util.concurrent.ExecutionException e) {
      throw TurnstileException.from(e.getCause());
    }
    List<LeaseRenewal> out = new ArrayList<>();
    for (var s : r.getLeasesList()) {
      out.add(new LeaseRenewal(s.getLeaseId(), Status.fromCodeValue(s.getCode()).getCode(),
          s.getMessage(), Duration.ofSeconds(s.getValidFor().getSeconds(),
              s.getValidFor().getNanos())));
    }
    return out;
  }

  /** Closes the channel: open Acquire streams are cancelled (their holds end). */
  @Override
  public void close() {
    channel.shutdownNow();
    scheduler.shutdownNow();
    callbackPool.shutdown();
    try {
      channel.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  public static final class Builder {
    private final String target;
    private Duration timeout = Duration.ofSeconds(10);
    private boolean retryUnavailable = true;
    private Ticker ticker = Ticker.SYSTEM;
    private String caFile;
    private String certFile;
    private String keyFile;
    private boolean tlsFromEnv = true;
    private ManagedChannel channel;

    private Builder(String target) {
      if (target == null || target.isEmpty()) {
        throw new IllegalArgumentException("the target must not be empty");
      }
      this.target = target;
    }

    /** Deadline of the unary calls (Release, Revoke, Describe, List, KeepAlive). */
    public Builder timeout(Duration d) { timeout = d; return this; }

    /** Retry UNAVAILABLE/CANCELLED acquires until the wait deadline (default on). */
    public Builder retryUnavailable(boolean on) { retryUnavailable = on; return this; }

    /** TLS from PEM files: caFile (required), certFile+keyFile (mutual TLS, may be null). */
    public Builder tls(String caFile, String certFile, String keyFile) {
      this.caFile = caFile;
      this.certFile = certFile;
      this.keyFile = keyFile;
      return this;
    }

    /** Plaintext, ignoring the TURNSTILE_TLS_* variables. */
    public Builder plaintext() {
      caFile = certFile = keyFile = null;
      tlsFromEnv = false;
      return this;
    }

    /** The monotonic clock of the watchdog and the deadlines (tests). */
    public Builder ticker(Ticker t) { ticker = t; return this; }

    /** A channel of one's own (tests: an in-process server); closed by close(). */
    Builder channel(ManagedChannel c) { channel = c; return this; }

    public TurnstileClient build() {
      return new TurnstileClient(this);
    }
  }
}
