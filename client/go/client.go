// Package turnstile is the Go client of turnstile (turnstile.v1.LockService),
// a fair, herd-free distributed lock service, in the style of etcd's
// concurrency.Mutex: Lock returns a held *Hold whose Done channel closes
// when the hold ends, with its fencing token, lease id and state.
//
//	c, err := turnstile.New("127.0.0.1:7400")
//	h, err := c.Lock(ctx, "my-lock", turnstile.WithWaitTimeout(30*time.Second))
//	// pass h.FencingToken() to the protected resource; stop when <-h.Done()
//	err = h.Unlock(ctx)
//
// Every error carries a gRPC status: status.Code(err) is the code the
// replica (or the library) ended with, e.g. codes.FailedPrecondition for a
// try-once on a held lock, codes.DeadlineExceeded when the wait timed out.
package turnstile

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/ioutil"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "turnstile/client/go/turnstilepb"
)

// TLSFiles names PEM files: CAFile set = TLS; CertFile + KeyFile (both or
// neither, with CAFile) = mutual TLS. ServerName is the name the server's
// certificate must carry when it is not the target's host.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
	ServerName                string
}

type clientOptions struct {
	tls         *TLSFiles
	creds       credentials.TransportCredentials
	dial        []grpc.DialOption
	owner       string
	retry       bool
	callTimeout time.Duration
	clock       Clock
}

// ClientOption configures New.
type ClientOption func(*clientOptions)

// WithTLSFiles uses TLS (and mutual TLS) from PEM files. Without it (and
// without WithTransportCredentials), TURNSTILE_TLS_CA_FILE,
// TURNSTILE_TLS_CERT_FILE and TURNSTILE_TLS_KEY_FILE are read like the CLI
// does (unset: plaintext).
func WithTLSFiles(f TLSFiles) ClientOption { return func(o *clientOptions) { o.tls = &f } }

// WithTransportCredentials uses the given credentials (overrides TLS files).
func WithTransportCredentials(c credentials.TransportCredentials) ClientOption {
	return func(o *clientOptions) { o.creds = c }
}

// WithDialOptions adds gRPC dial options.
func WithDialOptions(opts ...grpc.DialOption) ClientOption {
	return func(o *clientOptions) { o.dial = append(o.dial, opts...) }
}

// WithDefaultOwner is the owner of every Lock call without WithOwner.
func WithDefaultOwner(owner string) ClientOption { return func(o *clientOptions) { o.owner = owner } }

// WithRetryUnavailable (default true): a Lock whose wait ends UNAVAILABLE
// (or CANCELLED by a replica shutting down) is opened again with backoff
// (50 ms doubling to 1 s) until its wait timeout; through a target listing
// several replicas the retry reaches a live one. The retry queues anew.
// Try-once is never retried.
func WithRetryUnavailable(retry bool) ClientOption { return func(o *clientOptions) { o.retry = retry } }

// WithCallTimeout is the deadline of unary calls (Describe, List, Release,
// Revoke, KeepAlive) whose context has none (default 10 s).
func WithCallTimeout(d time.Duration) ClientOption {
	return func(o *clientOptions) { o.callTimeout = d }
}

// WithClock replaces the time source of the watchdog (for tests).
func WithClock(c Clock) ClientOption { return func(o *clientOptions) { o.clock = c } }

// Client is a connection to a turnstile target. Safe for concurrent use.
type Client struct {
	target string
	conn   *grpc.ClientConn
	stub   pb.LockServiceClient
	opts   clientOptions
}

// TLSFromEnv returns the TLS files named by TURNSTILE_TLS_CA_FILE,
// TURNSTILE_TLS_CERT_FILE and TURNSTILE_TLS_KEY_FILE, or nil if none is set.
func TLSFromEnv() *TLSFiles {
	f := TLSFiles{
		CAFile:   os.Getenv("TURNSTILE_TLS_CA_FILE"),
		CertFile: os.Getenv("TURNSTILE_TLS_CERT_FILE"),
		KeyFile:  os.Getenv("TURNSTILE_TLS_KEY_FILE"),
	}
	if f.CAFile == "" && f.CertFile == "" && f.KeyFile == "" {
		return nil
	}
	return &f
}

// TLSConfig builds a tls.Config from the files (mutual TLS with a client
// certificate).
func (f TLSFiles) TLSConfig() (*tls.Config, error) {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, invalid("TLS: the client certificate and key files go together")
	}
	if f.CAFile == "" && f.CertFile != "" {
		return nil, invalid("TLS: a client certificate needs a CA file (it is only sent over TLS)")
	}
	if f.CAFile == "" {
		return nil, invalid("TLS: no CA file")
	}
	pem, err := ioutil.ReadFile(f.CAFile)
	if err != nil {
		return nil, invalid("TLS CA file: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, invalid("TLS CA file %s: no PEM certificate", f.CAFile)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: f.ServerName, MinVersion: tls.VersionTLS12}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, invalid("TLS client certificate: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// staticAddresses parses the C-core style targets "ipv4:A:P,B:P" and
// "ipv6:[A]:P,[B]:P" (which grpc-go does not know) into addresses.
func staticAddresses(target string) []string {
	var rest string
	switch {
	case strings.HasPrefix(target, "ipv4:"):
		rest = target[len("ipv4:"):]
	case strings.HasPrefix(target, "ipv6:"):
		rest = target[len("ipv6:"):]
	default:
		return nil
	}
	var out []string
	for _, a := range strings.Split(rest, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// New connects (lazily, without blocking) to target: "host:port", any
// grpc-go target ("dns:///turnstile:7400"), or a list of replicas
// "ipv4:10.0.0.1:7400,10.0.0.2:7400" (round robin over them).
func New(target string, opts ...ClientOption) (*Client, error) {
	o := clientOptions{retry: true, callTimeout: 10 * time.Second, clock: realClock{}}
	for _, f := range opts {
		f(&o)
	}
	dial := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.ForceCodec(codec{}))}
	dialTarget := target
	serverName := ""
	if addrs := staticAddresses(target); addrs != nil {
		r := manual.NewBuilderWithScheme("turnstile-static")
		st := resolver.State{}
		for _, a := range addrs {
			st.Addresses = append(st.Addresses, resolver.Address{Addr: a})
		}
		r.InitialState(st)
		dial = append(dial, grpc.WithResolvers(r),
			grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
		dialTarget = "turnstile-static:///replicas"
		if host, _, err := net.SplitHostPort(addrs[0]); err == nil {
			serverName = host
		}
	}
	creds := o.creds
	if creds == nil {
		files := o.tls
		if files == nil {
			files = TLSFromEnv()
		}
		if files != nil {
			cfg, err := files.TLSConfig()
			if err != nil {
				return nil, err
			}
			if cfg.ServerName == "" {
				cfg.ServerName = serverName
			}
			creds = credentials.NewTLS(cfg)
		}
	}
	if creds != nil {
		dial = append(dial, grpc.WithTransportCredentials(creds))
	} else {
		dial = append(dial, grpc.WithInsecure())
	}
	dial = append(dial, o.dial...)
	conn, err := grpc.Dial(dialTarget, dial...)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "target %q: %v", target, err)
	}
	return &Client{target: target, conn: conn, stub: pb.NewLockServiceClient(conn), opts: o}, nil
}

// Close closes the connection; open Acquire streams are cancelled (the
// replicas delete their nodes: held locks are released, waits abandoned).
func (c *Client) Close() error { return c.conn.Close() }

// Target is the target given to New.
func (c *Client) Target() string { return c.target }

func (c *Client) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || c.opts.callTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.opts.callTimeout)
}

// ctxError turns a context's end into a status error.
func ctxError(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return status.Errorf(codes.DeadlineExceeded, "%s: %v", what, ctx.Err())
	}
	return status.Errorf(codes.Canceled, "%s: %v", what, ctx.Err())
}

// retryUnary runs a unary call, again with backoff (50 ms doubling to 1 s)
// while it fails UNAVAILABLE (a replica without ZooKeeper yet, draining or
// unreachable: through a multi-replica target the retry reaches another)
// or CANCELLED by a replica shutting down, until ctx ends. Every unary call of turnstile is safe to repeat (Release
// of a gone lease answers NOT_FOUND; a newer Revoke replaces an older one).
func (c *Client) retryUnary(ctx context.Context, call func(context.Context) error) error {
	backoff := nextBackoff(0)
	for {
		err := call(ctx)
		// CANCELLED while ctx is live comes from a replica shutting down.
		if err == nil || !retryable(err) || ctx.Err() != nil || !c.opts.retry {
			return err
		}
		if dl, ok := ctx.Deadline(); ok && !time.Now().Add(backoff).Before(dl) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = nextBackoff(backoff)
	}
}

// Release deletes the contender named by a lease id (any replica);
// NOT_FOUND if it is already gone.
func (c *Client) Release(ctx context.Context, leaseID string) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	return c.retryUnary(ctx, func(ctx context.Context) error {
		_, err := c.stub.Release(ctx, &pb.ReleaseRequest{LeaseId: leaseID})
		return err
	})
}

// Revoke asks the holder of a lease to let go (cooperative); it decides.
// NOT_FOUND if the lease is gone.
func (c *Client) Revoke(ctx context.Context, leaseID, requester, reason string) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	return c.retryUnary(ctx, func(ctx context.Context) error {
		_, err := c.stub.Revoke(ctx, &pb.RevokeRequest{LeaseId: leaseID, Requester: requester, Reason: reason})
		return err
	})
}

// LeaseStatus is one lease's answer to KeepAlive.
type LeaseStatus struct {
	LeaseID  string
	Code     codes.Code
	Message  string
	ValidFor time.Duration
}

// KeepAlive renews TTL leases once (1..100 ids); one status per id, in
// order. A Hold with a TTL does this by itself.
func (c *Client) KeepAlive(ctx context.Context, leaseIDs ...string) ([]LeaseStatus, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	s, err := c.stub.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Send(&pb.KeepAliveRequest{LeaseIds: leaseIDs}); err != nil {
		_, rerr := s.Recv()
		if rerr != nil {
			return nil, rerr
		}
		return nil, err
	}
	resp, err := s.Recv()
	if err != nil {
		return nil, err
	}
	_ = s.CloseSend()
	out := make([]LeaseStatus, 0, len(resp.Leases))
	for _, l := range resp.Leases {
		out = append(out, LeaseStatus{l.LeaseId, codes.Code(l.Code), l.Message, l.ValidFor.AsDuration()})
	}
	return out, nil
}

// Contender is one holder or waiter, as Describe shows it.
type Contender struct {
	Owner           string
	Metadata        map[string]string
	Since           time.Time // when it queued (zero if unknown)
	Granted         time.Time // when granted, where known (zero otherwise)
	FencingToken    uint64
	ReplicaID       string
	Identity        string // verified (mutual TLS), "" without
	Position        int64
	Kind            Kind
	MaxHolders      int32
	RevokeRequests  int64
	RevokeRequester string
	RevokeReason    string
}

// Description is a lock's holders (grant order) and waiters (queue order).
type Description struct {
	Name         string
	MaxHolders   int32     // a semaphore's N; 0 otherwise
	DelayedUntil time.Time // set while the lock is in lock-delay
	Holders      []Contender
	Waiters      []Contender
}

func kindOf(k pb.LockKind) Kind {
	switch k {
	case pb.LockKind_LOCK_KIND_SHARED:
		return KindShared
	case pb.LockKind_LOCK_KIND_SEMAPHORE:
		return KindSemaphore
	}
	return KindExclusive
}

func contender(c *pb.Contender) Contender {
	out := Contender{
		Owner: c.Owner, Metadata: c.Metadata, FencingToken: c.FencingToken,
		ReplicaID: c.ReplicaId, Identity: c.Identity, Position: c.Position, Kind: kindOf(c.Kind),
		MaxHolders: c.MaxHolders, RevokeRequests: c.RevokeRequests,
		RevokeRequester: c.RevokeRequester, RevokeReason: c.RevokeReason,
	}
	if c.Since != nil {
		out.Since = c.Since.AsTime()
	}
	if c.Granted != nil {
		out.Granted = c.Granted.AsTime()
	}
	return out
}

// Describe returns the holders and waiters of a lock, or nil and no error
// for a free lock (nobody holds or waits for it: the server's NOT_FOUND is
// an answer, not a failure).
func (c *Client) Describe(ctx context.Context, name string) (*Description, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	var r *pb.DescribeResponse
	err := c.retryUnary(ctx, func(ctx context.Context) (err error) {
		r, err = c.stub.Describe(ctx, &pb.DescribeRequest{Name: name})
		return err
	})
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	d := &Description{Name: r.Name, MaxHolders: r.MaxHolders}
	if r.DelayedUntil != nil {
		d.DelayedUntil = r.DelayedUntil.AsTime()
	}
	for _, h := range r.Holders {
		d.Holders = append(d.Holders, contender(h))
	}
	for _, w := range r.Waiters {
		d.Waiters = append(d.Waiters, contender(w))
	}
	return d, nil
}

// List returns the names of locks with holders or waiters, in byte order,
// starting with prefix; limit 0 = the server's default (1000). truncated
// says more matched.
func (c *Client) List(ctx context.Context, prefix string, limit int32) (names []string, truncated bool, err error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	var r *pb.ListResponse
	err = c.retryUnary(ctx, func(ctx context.Context) (err error) {
		r, err = c.stub.List(ctx, &pb.ListRequest{Prefix: prefix, Limit: limit})
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return r.Names, r.Truncated, nil
}

// Lock takes the lock `name` and returns the held Hold, or an error whose
// status.Code is the code the wait ended with (FAILED_PRECONDITION: try-once
// on a held lock; DEADLINE_EXCEEDED: the wait timed out; INVALID_ARGUMENT;
// RESOURCE_EXHAUSTED; UNAVAILABLE after retrying until the wait timeout;
// CANCELLED / DEADLINE_EXCEEDED when ctx ends first). ctx bounds the wait
// only: the hold lives until Unlock or loss.
func (c *Client) Lock(ctx context.Context, name string, opts ...LockOption) (*Hold, error) {
	o := lockOptions{owner: c.opts.owner, grace: DefaultGrace}
	for _, f := range opts {
		f(&o)
	}
	if !o.waitSet {
		o.wait = DefaultWait
		if dl, ok := ctx.Deadline(); ok {
			o.wait = time.Until(dl)
			if o.wait < 0 {
				o.wait = 0
			}
		}
	}
	if err := o.validate(name); err != nil {
		return nil, err
	}
	wait := o.wait
	end := time.Now().Add(wait)
	backoff := nextBackoff(0)
	for {
		h, err := c.lockOnce(ctx, name, &o, wait)
		if err == nil {
			return h, nil
		}
		if !retryable(err) || !c.opts.retry || o.wait <= 0 || ctx.Err() != nil ||
			!time.Now().Add(backoff).Before(end) {
			return nil, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctxError(ctx, "waiting for "+name)
		case <-t.C:
		}
		backoff = nextBackoff(backoff)
		wait = time.Until(end)
		if wait < time.Millisecond {
			wait = time.Millisecond
		}
	}
}

func (c *Client) lockOnce(ctx context.Context, name string, o *lockOptions, wait time.Duration) (*Hold, error) {
	open := &pb.AcquireOpen{
		Name: name, Owner: o.owner, WaitTimeout: durationpb.New(wait), Ttl: durationpb.New(o.ttl),
		Metadata: o.metadata, RevokeHolders: o.revokeHolders, RevokeReason: o.revokeReason,
		LockDelay: durationpb.New(o.lockDelay), MaxHolders: o.maxHolders,
	}
	switch o.kind {
	case KindShared:
		open.Kind = pb.LockKind_LOCK_KIND_SHARED
	case KindSemaphore:
		open.Kind = pb.LockKind_LOCK_KIND_SEMAPHORE
	default:
		open.Kind = pb.LockKind_LOCK_KIND_EXCLUSIVE
	}
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := c.stub.Acquire(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	h := newHold(c, name, o, stream, cancel)
	h.start(open)
	t := time.NewTimer(wait + o.grace)
	defer t.Stop()
	select {
	case <-h.acquiredCh:
		return h, nil
	case <-h.endedCh:
		select {
		case <-h.acquiredCh:
			return h, nil
		default:
		}
		return nil, h.waitError()
	case <-ctx.Done():
		h.abandon()
		return nil, ctxError(ctx, "waiting for "+name)
	case <-t.C:
		h.abandon()
		return nil, status.Errorf(codes.DeadlineExceeded, "no answer from %s within %v", c.target, wait+o.grace)
	}
}
