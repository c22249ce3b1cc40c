package turnstile

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "turnstile/client/go/turnstilepb"
)

// The in-process fake replica below decodes with the APIv2 codec too.
func init() { encoding.RegisterCodec(codec{}) }

// fakeReplica is an in-process LockService with scripted answers by lock
// name, to test the library's stream handling and TLS without ZooKeeper.
type fakeReplica struct {
	pb.UnimplementedLockServiceServer
	mu       sync.Mutex
	opens    []*pb.AcquireOpen
	identity []string // client certificate CNs seen
	attempts int32
	revokes  []*pb.RevokeRequest
	checks   []*pb.CheckTokenRequest
}

func ev(t pb.AcquireEvent_Type) *pb.AcquireEvent { return &pb.AcquireEvent{Type: t} }

func (f *fakeReplica) Acquire(st pb.LockService_AcquireServer) error {
	if p, ok := peer.FromContext(st.Context()); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			f.mu.Lock()
			f.identity = append(f.identity, info.State.PeerCertificates[0].Subject.CommonName)
			f.mu.Unlock()
		}
	}
	req, err := st.Recv()
	if err != nil {
		return err
	}
	open := req.GetOpen()
	if open == nil {
		return status.Error(codes.FailedPrecondition, "first message must be open")
	}
	f.mu.Lock()
	f.opens = append(f.opens, open)
	f.mu.Unlock()
	switch open.Name {
	case "held":
		return status.Error(codes.FailedPrecondition, "try-once: lock is held")
	case "flaky":
		if atomic.AddInt32(&f.attempts, 1) < 3 {
			return status.Error(codes.Unavailable, "replica is draining")
		}
	}
	st.Send(&pb.AcquireEvent{Type: pb.AcquireEvent_QUEUED,
		Detail: &pb.AcquireEvent_Queued{Queued: &pb.Queued{Position: 2, Ahead: 2}}})
	st.Send(&pb.AcquireEvent{Type: pb.AcquireEvent_QUEUED,
		Detail: &pb.AcquireEvent_Queued{Queued: &pb.Queued{Position: 1, Ahead: 1}}})
	st.Send(&pb.AcquireEvent{Type: pb.AcquireEvent_ACQUIRED, Detail: &pb.AcquireEvent_Acquired{
		Acquired: &pb.Acquired{LeaseId: "lease-" + open.Name, FencingToken: 42,
			SessionTimeout: durationpb.New(4 * time.Second), SafeFor: durationpb.New(3 * time.Second),
			RefreshWithin: durationpb.New(2 * time.Second)}}})
	switch open.Name {
	case "break":
		return status.Error(codes.Unavailable, "replica went away")
	case "deleted":
		st.Send(&pb.AcquireEvent{Type: pb.AcquireEvent_LOST, Detail: &pb.AcquireEvent_Lost{
			Lost: &pb.Lost{Reason: pb.Lost_DELETED, Message: "released by lease id"}}})
		return nil
	}
	st.Send(&pb.AcquireEvent{Type: pb.AcquireEvent_REVOKE_REQUESTED, Detail: &pb.AcquireEvent_RevokeRequested{
		RevokeRequested: &pb.RevokeRequested{Requester: "ops", Reason: "deploy"}}})
	st.Send(&pb.AcquireEvent{Type: pb.AcquireEvent_SUSPENDED, Detail: &pb.AcquireEvent_Suspended{
		Suspended: &pb.Suspended{SafeFor: durationpb.New(2 * time.Second)}}})
	st.Send(&pb.AcquireEvent{Type: pb.AcquireEvent_RESUMED, Detail: &pb.AcquireEvent_StillHeld{
		StillHeld: &pb.StillHeld{SafeFor: durationpb.New(3 * time.Second), RefreshWithin: durationpb.New(2 * time.Second)}}})
	st.Send(ev(pb.AcquireEvent_RELEASING)) // clients ignore it
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		if req.GetRelease() != nil {
			st.Send(ev(pb.AcquireEvent_RELEASED))
			return nil
		}
	}
}

func (f *fakeReplica) Revoke(ctx context.Context, r *pb.RevokeRequest) (*pb.RevokeResponse, error) {
	if r.LeaseId == "gone" {
		return nil, status.Error(codes.NotFound, "lease gone")
	}
	f.mu.Lock()
	f.revokes = append(f.revokes, r)
	f.mu.Unlock()
	return &pb.RevokeResponse{}, nil
}

func (f *fakeReplica) Describe(ctx context.Context, r *pb.DescribeRequest) (*pb.DescribeResponse, error) {
	if r.Name != "L" {
		return nil, status.Error(codes.NotFound, "no such lock")
	}
	return &pb.DescribeResponse{Name: "L", Holders: []*pb.Contender{{Owner: "a", FencingToken: 7,
		Kind: pb.LockKind_LOCK_KIND_SHARED, Position: 1}}, Waiters: []*pb.Contender{{Owner: "b", Position: 2}}}, nil
}

// CheckToken answers as if lock "L" had the holder 7 and the waiter 9;
// "denied" is refused by policy; "flaky" is UNAVAILABLE twice first;
// "future" answers a verdict this library does not know.
func (f *fakeReplica) CheckToken(ctx context.Context, r *pb.CheckTokenRequest) (*pb.CheckTokenResponse, error) {
	f.mu.Lock()
	f.checks = append(f.checks, r)
	f.mu.Unlock()
	if r.Name == "" || r.FencingToken == 0 {
		return nil, status.Error(codes.InvalidArgument, "name or fencing_token")
	}
	resp := &pb.CheckTokenResponse{HighestHolderToken: 7, Linearizable: !r.AllowStale}
	switch r.Name {
	case "denied":
		return nil, status.Error(codes.PermissionDenied, "describe denied")
	case "flaky":
		if atomic.AddInt32(&f.attempts, 1) < 3 {
			return nil, status.Error(codes.Unavailable, "no ZooKeeper session")
		}
	case "future":
		resp.Verdict = pb.CheckTokenResponse_Verdict(99)
		return resp, nil
	}
	switch r.FencingToken {
	case 7:
		resp.Verdict = pb.CheckTokenResponse_CURRENT
	case 9:
		resp.Verdict = pb.CheckTokenResponse_WAITING
	default:
		resp.Verdict = pb.CheckTokenResponse_SUPERSEDED
	}
	return resp, nil
}

// pki writes a CA, a server certificate for 127.0.0.1 and a client
// certificate (CN go-client) as PEM files into dir.
func pki(t *testing.T, dir string) (ca, srvCert, srvKey, cliCert, cliKey string) {
	t.Helper()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, certName, keyName string) (string, string) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(certName, "CERTIFICATE", der), write(keyName, "EC PRIVATE KEY", kder)
	}
	ca = write("ca.pem", "CERTIFICATE", caDER)
	srvCert, srvKey = leaf(2, "replica", x509.ExtKeyUsageServerAuth, "server.pem", "server.key")
	cliCert, cliKey = leaf(3, "go-client", x509.ExtKeyUsageClientAuth, "client.pem", "client.key")
	return
}

// startFake serves a fakeReplica; with creds (mutual TLS) if given.
func startFake(t *testing.T, creds credentials.TransportCredentials) (*fakeReplica, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	s := grpc.NewServer(opts...)
	f := &fakeReplica{}
	pb.RegisterLockServiceServer(s, f)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return f, lis.Addr().String()
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
	}
}

func TestLockAgainstFakeReplica(t *testing.T) {
	t.Setenv("TURNSTILE_TLS_CA_FILE", "")
	f, addr := startFake(t, nil)
	c, err := New(addr, WithDefaultOwner("me"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var mu sync.Mutex
	var queued []int64
	var changes []StateChange
	revoked := make(chan [2]string, 1)
	released := make(chan struct{})
	h, err := c.Lock(ctx, "L", WithWaitTimeout(5*time.Second), WithTTL(0), Shared(),
		WithMetadata(map[string]string{"job": "1"}), WithRevokeHolders("hurry"),
		OnQueued(func(p int64) { mu.Lock(); queued = append(queued, p); mu.Unlock() }),
		OnRevoke(func(req, why string) { revoked <- [2]string{req, why} }),
		OnStateChange(func(ch StateChange) {
			mu.Lock()
			changes = append(changes, ch)
			mu.Unlock()
			if ch.State == StateReleased {
				close(released)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	if h.FencingToken() != 42 || h.LeaseID() != "lease-L" || h.SessionTimeout() != 4*time.Second {
		t.Fatalf("hold %d %q %v", h.FencingToken(), h.LeaseID(), h.SessionTimeout())
	}
	select {
	case r := <-revoked:
		if r != [2]string{"ops", "deploy"} {
			t.Fatalf("revoke %v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no revoke callback")
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	waitFor(t, released, "released callback")
	waitFor(t, h.Done(), "Done")
	if h.State() != StateReleased || h.Lost() != "" || h.Err() != nil || h.ValidFor() != 0 {
		t.Fatalf("after unlock: %v %q %v", h.State(), h.Lost(), h.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(queued) != 2 || queued[0] != 2 || queued[1] != 1 {
		t.Fatalf("queued %v", queued)
	}
	want := []State{StateSuspended, StateHeld, StateReleased}
	if len(changes) != len(want) {
		t.Fatalf("changes %v", changes)
	}
	for i, s := range want {
		if changes[i].State != s {
			t.Fatalf("changes %v, want %v", changes, want)
		}
	}
	o := f.opens[0]
	if o.Owner != "me" || o.Kind != pb.LockKind_LOCK_KIND_SHARED || o.Metadata["job"] != "1" ||
		!o.RevokeHolders || o.RevokeReason != "hurry" || o.WaitTimeout.AsDuration() != 5*time.Second {
		t.Fatalf("open %v", o)
	}
	if err := c.Revoke(ctx, "lease-L", "me", "why"); err != nil {
		t.Fatal(err)
	}
	if err := c.Revoke(ctx, "gone", "me", "why"); status.Code(err) != codes.NotFound {
		t.Fatalf("revoke of a gone lease: %v", err)
	}
	d, err := c.Describe(ctx, "L")
	if err != nil || len(d.Holders) != 1 || d.Holders[0].Kind != KindShared || d.Waiters[0].Owner != "b" {
		t.Fatalf("describe %v %v", d, err)
	}
	if d, err := c.Describe(ctx, "M"); d != nil || err != nil {
		t.Fatalf("describe of a free lock: %v %v, not nil and no error", d, err)
	}
}

func TestStreamOutcomes(t *testing.T) {
	t.Setenv("TURNSTILE_TLS_CA_FILE", "")
	f, addr := startFake(t, nil)
	c, err := New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Lock(ctx, "held", TryOnce()); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("try-once on a held lock: %v", err)
	}
	// UNAVAILABLE twice, then granted: retried within the wait.
	h, err := c.Lock(ctx, "flaky", WithWaitTimeout(5*time.Second))
	if err != nil || atomic.LoadInt32(&f.attempts) != 3 {
		t.Fatalf("flaky: %v after %d attempts", err, f.attempts)
	}
	h.Unlock(ctx)
	h, err = c.Lock(ctx, "break", WithWaitTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, h.Done(), "loss of a broken stream")
	if h.Lost() != "CONNECTION" {
		t.Fatalf("broken stream: lost %q", h.Lost())
	}
	h, err = c.Lock(ctx, "deleted", WithWaitTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, h.Done(), "LOST DELETED")
	if h.Lost() != "DELETED" {
		t.Fatalf("lost %q", h.Lost())
	}
	if err := h.Unlock(ctx); status.Code(err) != codes.NotFound {
		t.Fatalf("unlock after loss: %v", err)
	}
}

func TestMutualTLSFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	ca, srvCert, srvKey, cliCert, cliKey := pki(t, dir)
	pair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(ca)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	f, addr := startFake(t, credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}))
	ctx := context.Background()

	// CA only: the server refuses the handshake (no client certificate).
	t.Setenv("TURNSTILE_TLS_CA_FILE", ca)
	t.Setenv("TURNSTILE_TLS_CERT_FILE", "")
	t.Setenv("TURNSTILE_TLS_KEY_FILE", "")
	c, err := New(addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx, "L", TryOnce()); status.Code(err) != codes.Unavailable {
		t.Fatalf("without a client certificate: %v", err)
	}
	c.Close()

	t.Setenv("TURNSTILE_TLS_CERT_FILE", cliCert)
	t.Setenv("TURNSTILE_TLS_KEY_FILE", cliKey)
	c, err = New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := c.Lock(ctx, "L", WithWaitTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("mutual TLS: %v", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.identity) == 0 || f.identity[len(f.identity)-1] != "go-client" {
		t.Fatalf("identities %v", f.identity)
	}
}
