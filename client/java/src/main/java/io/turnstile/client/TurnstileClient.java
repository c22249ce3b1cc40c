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
import turnstile.v1.Lock.CheckTokenRequest;
import turnstile.v1.Lock.CheckTokenResponse;
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

  /** A sequential executor for one object's callbacks, off gRPC's threads. */
  Executor newCallbackExecutor() {
    return MoreExecutors.newSequentialExecutor(callbackPool);
  }

  /** Runs blocking work (a release) off the callback threads. */
  void runAsync(Runnable r) {
    try {
      callbackPool.execute(r);
    } catch (java.util.concurrent.RejectedExecutionException closed) {
      // the client is closed: its streams are cancelled anyway
    }
  }

  /**
   * Why {@code name} is not a valid lock name (lock.proto: 1..256 bytes of
   * UTF-8 without control characters), or null if it is.
   */
  static String invalidName(String name) {
    if (name == null) {
      return "name: null";
    }
    int bytes = name.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
    if (bytes < 1 || bytes > 256) {
      return "name: " + bytes + " bytes, must be 1..256";
    }
    for (int i = 0; i < name.length(); ) {
      int cp = name.codePointAt(i);
      if (cp <= 0x1f || (cp >= 0x7f && cp <= 0x9f)) {
        return String.format("name: control character U+%04X", cp);
      }
      if (Character.isSurrogate(name.charAt(i)) && !Character.isSupplementaryCodePoint(cp)) {
        return "name: not valid UTF-16 (a lone surrogate)";
      }
      i += Character.charCount(cp);
    }
    return null;
  }

  /**
   * The names in canonical order, the order in which {@link #acquireAll}
   * takes them: by their UTF-8 bytes (unsigned), as the replicas and every
   * other client library sort them, so that two sets taken in this order
   * cannot deadlock. INVALID_ARGUMENT (TurnstileException) for no names, a
   * bad name, or a name given twice.
   */
  public static List<String> canonicalOrder(java.util.Collection<String> names) {
    if (names == null || names.isEmpty()) {
      throw new TurnstileException(Status.Code.INVALID_ARGUMENT, "names: none given");
    }
    List<byte[]> keys = new ArrayList<>();
    for (String n : names) {
      String bad = invalidName(n);
      if (bad != null) {
        throw new TurnstileException(Status.Code.INVALID_ARGUMENT, "lock \"" + n + "\": " + bad);
      }
      keys.add(n.getBytes(java.nio.charset.StandardCharsets.UTF_8));
    }
    keys.sort(java.util.Arrays::compareUnsigned);
    List<String> out = new ArrayList<>();
    for (int i = 0; i < keys.size(); i++) {
      if (i > 0 && java.util.Arrays.equals(keys.get(i), keys.get(i - 1))) {
        throw new TurnstileException(Status.Code.INVALID_ARGUMENT, "names: \""
            + new String(keys.get(i), java.nio.charset.StandardCharsets.UTF_8) + "\" given twice");
      }
      out.add(new String(keys.get(i), java.nio.charset.StandardCharsets.UTF_8));
    }
    return List.copyOf(out);
  }

  /**
   * Takes every lock of {@code names}, all or nothing, under one deadline
   * (the options' waitTimeout; ZERO: each is tried once), one after the
   * other in {@link #canonicalOrder}, each waiting only for what is left.
   * The options (kind, owner, metadata, ttl, ...) apply to every lock.
   * Throws TurnstileException: INVALID_ARGUMENT before any call for bad
   * input; otherwise the failing lock's code (DEADLINE_EXCEEDED,
   * FAILED_PRECONDITION for a try-once, ...), naming it, or ABORTED when a
   * lock already taken was lost or fell in doubt before the set was
   * complete; the locks already taken are released before it throws.
   */
  public MultiHold acquireAll(java.util.Collection<String> names, AcquireOptions options) {
    return MultiHold.acquire(this, names, options, null);
  }

  /**
   * {@link #acquireAll(java.util.Collection, AcquireOptions)}; {@code onLost}
   * is told once if the set breaks (one of its locks lost or in doubt).
   */
  public MultiHold acquireAll(java.util.Collection<String> names, AcquireOptions options,
                              MultiLossListener onLost) {
    return MultiHold.acquire(this, names, options, onLost);
  }

  /** A candidate (or a handle to observe) of the election {@code name}. */
  public Election election(String name, ElectionOptions options) {
    return new Election(this, name, options);
  }

  public Election election(String name) {
    return new Election(this, name, ElectionOptions.builder().build());
  }

  /**
   * Replaces the metadata of a hold by lease id and fencing token, keeping
   * the hold (LockService.Proclaim; any replica). Throws TurnstileException:
   * INVALID_ARGUMENT (empty lease id, token 0, metadata beyond the limits:
   * checked before the call), NOT_FOUND (the lease is gone),
   * FAILED_PRECONDITION (the token is not this lease's: stale),
   * PERMISSION_DENIED, UNAVAILABLE.
   */
  public void proclaim(String leaseId, long fencingToken, java.util.Map<String, String> metadata) {
    if (leaseId == null || leaseId.isEmpty()) {
      throw new TurnstileException(Status.Code.INVALID_ARGUMENT, "lease_id: empty");
    }
    if (fencingToken == 0) {
      throw new TurnstileException(Status.Code.INVALID_ARGUMENT, "fencing_token: 0");
    }
    try {
      AcquireOptions.builder().metadata(metadata).build();
    } catch (IllegalArgumentException | NullPointerException e) {
      throw new TurnstileException(Status.Code.INVALID_ARGUMENT, e.getMessage());
    }
    try {
      unary().proclaim(turnstile.v1.Lock.ProclaimRequest.newBuilder().setLeaseId(leaseId)
          .setFencingToken(fencingToken).putAllMetadata(metadata).build());
    } catch (StatusRuntimeException e) {
      throw TurnstileException.from(e);
    }
  }

  /**
   * Observes the lock {@code name} (LockService.Observe): {@code observer}
   * gets its current state at once, then one after every change, in order on
   * a callback thread, until {@link Observation#close()}. The stream is
   * opened again by itself when the replica drains (see {@link Observation}).
   */
  public Observation observe(String name, LockObserver observer) {
    Observation o = new Observation(this, name, observer, newCallbackExecutor());
    o.start();
    return o;
  }

  /**
   * Observes the leader of the election {@code name}: {@code listener} gets
   * the current leader (or none, or unknown) at once, then one event per
   * change of leader or of its value (changes of the waiters alone are not
   * told), until {@link Observation#close()}.
   */
  public Observation observeLeader(String name, LeaderListener listener) {
    return observe(name, new LockObserver() {
      private boolean first = true;
      private LeaderEvent last;

      @Override
      public void onState(LockState s) {
        LeaderEvent ev = new LeaderEvent(leaderOf(s), s.unknown(), s.message());
        if (!first && ev.unknown() == last.unknown() && sameLeader(ev.leader(), last.leader())) {
          return;
        }
        first = false;
        last = ev;
        listener.onLeader(ev);
      }

      @Override
      public void onError(TurnstileException e) {
        listener.onError(e);
      }
    });
  }

  static Leader leaderOf(LockState s) {
    if (s.unknown() || s.holders().isEmpty()) {
      return null;
    }
    Contender h = s.holders().get(0);
    return new Leader(s.name(), h.metadata().getOrDefault(Election.VALUE_KEY, ""), h.owner(),
        h.identity(), h.fencingToken(), h.granted(), h.since(), h.metadata());
  }

  private static boolean sameLeader(Leader a, Leader b) {
    if (a == null || b == null) {
      return a == b;
    }
    // one term (token) has one owner and identity; its value may change
    return a.fencingToken() == b.fencingToken() && a.value().equals(b.value());
  }

  /** {@link #leader(String, Duration)} with the client's call timeout. */
  public Optional<Leader> leader(String name) {
    return leader(name, timeout);
  }

  /**
   * The election's current leader, once (empty: no leader). While the
   * replica cannot tell (unknown) it waits for a known state, up to
   * {@code timeout} (then DEADLINE_EXCEEDED).
   */
  public Optional<Leader> leader(String name, Duration timeout) {
    java.util.concurrent.CompletableFuture<Optional<Leader>> f =
        new java.util.concurrent.CompletableFuture<>();
    try (Observation o = observeLeader(name, new LeaderListener() {
      @Override
      public void onLeader(LeaderEvent ev) {
        if (!ev.unknown()) {
          f.complete(ev.leaderOpt());
        }
      }

      @Override
      public void onError(TurnstileException e) {
        f.completeExceptionally(e);
      }
    })) {
      return f.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new TurnstileException(Status.Code.CANCELLED, "interrupted", e);
    } catch (java.util.concurrent.TimeoutException e) {
      throw new TurnstileException(Status.Code.DEADLINE_EXCEEDED,
          "no known state of " + name + " within " + timeout);
    } catch (java.util.concurrent.ExecutionException e) {
      throw TurnstileException.from(e.getCause());
    }
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

  /**
   * Whether {@code fencingToken} still belongs to a hold of the lock {@code name} (Chubby's
   * CheckSequencer), for a resource server that cannot remember the highest token it has seen:
   * accept a write only when the answer {@link TokenCheck#isCurrent()}. The answer reflects every
   * grant and release announced before the call (the replica syncs ZooKeeper first). Throws
   * TurnstileException: INVALID_ARGUMENT (empty or malformed name, token 0), PERMISSION_DENIED
   * (policy action {@code describe}), UNAVAILABLE (the answer is unknown: refuse the write or ask
   * again).
   */
  public TokenCheck checkToken(String name, long fencingToken) {
    return checkToken(name, fencingToken, false);
  }

  /**
   * {@link #checkToken(String, long)}; with {@code allowStale} the replica skips ZooKeeper's sync
   * and answers from the view of the ZooKeeper server it is connected to: cheaper, but it may miss
   * the last moments' changes (see lock.proto's CheckToken).
   */
  public TokenCheck checkToken(String name, long fencingToken, boolean allowStale) {
    CheckTokenResponse r;
    try {
      r = unary().checkToken(CheckTokenRequest.newBuilder().setName(name)
          .setFencingToken(fencingToken).setAllowStale(allowStale).build());
    } catch (StatusRuntimeException e) {
      throw TurnstileException.from(e);
    }
    TokenVerdict verdict = switch (r.getVerdict()) {
      case CURRENT -> TokenVerdict.CURRENT;
      case SUPERSEDED -> TokenVerdict.SUPERSEDED;
      case WAITING -> TokenVerdict.WAITING;
      // a verdict this library does not know: no answer it can act on
      default -> throw new TurnstileException(Status.Code.UNKNOWN,
          "CheckToken: unknown verdict " + r.getVerdictValue());
    };
    return new TokenCheck(verdict, r.getHighestHolderToken(), r.getLinearizable());
  }

  static Contender contender(turnstile.v1.Lock.Contender c) {
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
