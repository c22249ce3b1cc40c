package turnstile

import (
	"context"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "turnstile/client/go/turnstilepb"
)

// scriptedReplica is an in-process LockService whose Acquire, Observe and
// Proclaim run the test's functions; it records what the client asked.
type scriptedReplica struct {
	pb.UnimplementedLockServiceServer
	acquire  func(n int, open *pb.AcquireOpen, st pb.LockService_AcquireServer) error
	observe  func(n int, st pb.LockService_ObserveServer) error
	proclaim func(r *pb.ProclaimRequest) error

	mu        sync.Mutex
	opens     []*pb.AcquireOpen
	released  []string // lock names whose hold the client released
	observes  int
	proclaims []*pb.ProclaimRequest
}

func (f *scriptedReplica) Acquire(st pb.LockService_AcquireServer) error {
	req, err := st.Recv()
	if err != nil {
		return err
	}
	open := req.GetOpen()
	f.mu.Lock()
	f.opens = append(f.opens, open)
	n := len(f.opens)
	f.mu.Unlock()
	return f.acquire(n, open, st)
}

func (f *scriptedReplica) Observe(r *pb.ObserveRequest, st pb.LockService_ObserveServer) error {
	f.mu.Lock()
	f.observes++
	n := f.observes
	f.mu.Unlock()
	return f.observe(n, st)
}

func (f *scriptedReplica) Proclaim(ctx context.Context, r *pb.ProclaimRequest) (*pb.ProclaimResponse, error) {
	f.mu.Lock()
	f.proclaims = append(f.proclaims, r)
	f.mu.Unlock()
	if err := f.proclaim(r); err != nil {
		return nil, err
	}
	return &pb.ProclaimResponse{}, nil
}

func (f *scriptedReplica) openNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, o := range f.opens {
		out = append(out, o.Name)
	}
	return out
}

func (f *scriptedReplica) releasedNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.released...)
}

// grantAndHold grants (with a long validity) and holds until the client
// releases (RELEASED, noted) or goes away; before that, events from `more`
// are sent as they come.
func (f *scriptedReplica) grantAndHold(open *pb.AcquireOpen, token uint64, st pb.LockService_AcquireServer,
	more <-chan *pb.AcquireEvent) error {
	st.Send(&pb.AcquireEvent{Type: pb.AcquireEvent_ACQUIRED, Detail: &pb.AcquireEvent_Acquired{
		Acquired: &pb.Acquired{LeaseId: "lease-" + open.Name, FencingToken: token,
			SessionTimeout: durationpb.New(10 * time.Second), SafeFor: durationpb.New(time.Minute),
			RefreshWithin: durationpb.New(time.Minute)}}})
	reqs := make(chan *pb.AcquireRequest)
	go func() {
		defer close(reqs)
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			reqs <- r
		}
	}()
	for {
		select {
		case ev := <-more:
			st.Send(ev)
			if ev.Type == pb.AcquireEvent_LOST {
				return nil
			}
		case r, ok := <-reqs:
			if !ok {
				return nil
			}
			if r.GetRelease() != nil {
				f.mu.Lock()
				f.released = append(f.released, open.Name)
				f.mu.Unlock()
				st.Send(ev(pb.AcquireEvent_RELEASED))
				return nil
			}
		}
	}
}

func startScripted(t *testing.T, f *scriptedReplica) *Client {
	t.Helper()
	t.Setenv("TURNSTILE_TLS_CA_FILE", "")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterLockServiceServer(s, f)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	c, err := New(lis.Addr().String(), WithDefaultOwner("tester"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func tokenOf(name string) uint64 { return uint64(100 + name[0]) }

func TestAcquireAllTakesCanonicalOrderWithTokensPerName(t *testing.T) {
	f := &scriptedReplica{}
	f.acquire = func(n int, open *pb.AcquireOpen, st pb.LockService_AcquireServer) error {
		return f.grantAndHold(open, tokenOf(open.Name), st, nil)
	}
	c := startScripted(t, f)
	ctx := context.Background()
	names := []string{"b", "é", "a", "Z", "c"} // bytes: Z < a < b < c < é
	m, err := c.AcquireAll(ctx, names, WithWaitTimeout(5*time.Second), WithOwner("multi"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Z", "a", "b", "c", "é"}
	if got := f.openNames(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("acquired in order %v, want %v", got, want)
	}
	if got := m.Names(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Names %v", got)
	}
	for _, n := range names {
		if m.FencingToken(n) != tokenOf(n) || m.Hold(n).LeaseID() != "lease-"+n {
			t.Fatalf("%s: token %d lease %q", n, m.FencingToken(n), m.Hold(n).LeaseID())
		}
	}
	for _, o := range f.opens {
		if o.Owner != "multi" || o.WaitTimeout.AsDuration() > 5*time.Second || o.WaitTimeout.AsDuration() <= 0 {
			t.Fatalf("open %v", o)
		}
	}
	if !m.Held() {
		t.Fatal("set not held")
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m.Done(), "Done after Release")
	rel := f.releasedNames()
	sort.Strings(rel)
	if strings.Join(rel, ",") != strings.Join(want, ",") {
		t.Fatalf("released %v", rel)
	}
	if m.Held() || m.Lost() != "" {
		t.Fatalf("after release: held %v lost %q", m.Held(), m.Lost())
	}
}

func TestAcquireAllRefusesBadInputBeforeAnyCall(t *testing.T) {
	f := &scriptedReplica{}
	f.acquire = func(n int, open *pb.AcquireOpen, st pb.LockService_AcquireServer) error {
		return f.grantAndHold(open, 1, st, nil)
	}
	c := startScripted(t, f)
	ctx := context.Background()
	for _, names := range [][]string{{"a", "b", "a"}, {}, {"a", ""}, {"a", "bad\x01name"}} {
		if _, err := c.AcquireAll(ctx, names, TryOnce()); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%q: %v", names, err)
		}
	}
	if _, err := c.AcquireAll(ctx, []string{"x", "y"}, WithTTL(time.Millisecond)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad ttl: %v", err)
	}
	if got := f.openNames(); len(got) != 0 {
		t.Fatalf("calls made: %v", got)
	}
}

func TestAcquireAllReleasesWhatItTookWhenTheThirdFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  LockOption
		code codes.Code
		wait bool
	}{
		{"timeout", WithWaitTimeout(2 * time.Second), codes.DeadlineExceeded, true},
		{"try-once", TryOnce(), codes.FailedPrecondition, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &scriptedReplica{}
			f.acquire = func(n int, open *pb.AcquireOpen, st pb.LockService_AcquireServer) error {
				if open.Name == "c" {
					return status.Error(tc.code, "scripted refusal")
				}
				return f.grantAndHold(open, tokenOf(open.Name), st, nil)
			}
			c := startScripted(t, f)
			_, err := c.AcquireAll(context.Background(), []string{"d", "c", "b", "a"}, tc.opt)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), `"c"`) {
				t.Fatalf("err %v, want %v naming c", err, tc.code)
			}
			// "d" comes after "c": never asked for.
			if got := strings.Join(f.openNames(), ","); got != "a,b,c" {
				t.Fatalf("opens %s", got)
			}
			// a and b were released (RELEASED seen) before AcquireAll returned.
			rel := f.releasedNames()
			sort.Strings(rel)
			if strings.Join(rel, ",") != "a,b" {
				t.Fatalf("released %v, want a,b", rel)
			}
			for _, o := range f.opens {
				if (o.WaitTimeout.AsDuration() > 0) != tc.wait {
					t.Fatalf("wait %v for %s", o.WaitTimeout.AsDuration(), o.Name)
				}
			}
		})
	}
}

func TestAcquireAllLosingOneLosesTheSet(t *testing.T) {
	f := &scriptedReplica{}
	lose := make(chan *pb.AcquireEvent, 1)
	f.acquire = func(n int, open *pb.AcquireOpen, st pb.LockService_AcquireServer) error {
		var more <-chan *pb.AcquireEvent
		if open.Name == "b" {
			more = lose
		}
		return f.grantAndHold(open, tokenOf(open.Name), st, more)
	}
	c := startScripted(t, f)
	m, err := c.AcquireAll(context.Background(), []string{"a", "b", "c"}, WithWaitTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
		t.Fatal("done before any loss")
	default:
	}
	lose <- &pb.AcquireEvent{Type: pb.AcquireEvent_SUSPENDED, Detail: &pb.AcquireEvent_Suspended{
		Suspended: &pb.Suspended{SafeFor: durationpb.New(time.Minute)}}}
	waitFor(t, m.Done(), "the set's end after one hold fell in doubt")
	if !strings.Contains(m.Lost(), `"b" in doubt`) || m.Held() {
		t.Fatalf("lost %q held %v", m.Lost(), m.Held())
	}
	// The others are released by the library.
	deadline := time.Now().Add(10 * time.Second)
	for {
		rel := f.releasedNames()
		sort.Strings(rel)
		if strings.Join(rel, ",") == "a,b,c" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("released %v, want a,b,c", rel)
		}
		time.Sleep(10 * time.Millisecond) // polling the fake's record: the releases come from other goroutines
	}
	if err := m.Release(context.Background()); err != nil {
		t.Fatalf("release of a broken set: %v", err)
	}
}

func TestCampaignQueuesAgainUntilElected(t *testing.T) {
	f := &scriptedReplica{}
	f.acquire = func(n int, open *pb.AcquireOpen, st pb.LockService_AcquireServer) error {
		switch n {
		case 1:
			return status.Error(codes.ResourceExhausted, "too many waiters")
		case 2:
			return status.Error(codes.Unavailable, "draining")
		case 3:
			return status.Error(codes.DeadlineExceeded, "wait_timeout passed") // the replica's cap
		case 4:
			return status.Error(codes.InvalidArgument, "wait_timeout is 20000ms; it must be 0..3000ms")
		}
		return f.grantAndHold(open, 77, st, nil)
	}
	c := startScripted(t, f)
	var mu sync.Mutex
	var calls []string
	e := c.NewElection("leader", CandidateOwner("node-1"),
		OnLeadership(func(is bool, why string) {
			mu.Lock()
			calls = append(calls, strings.Fields(why)[0])
			mu.Unlock()
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := e.Campaign(ctx, "10.0.0.1:80")
	if err != nil {
		t.Fatal(err)
	}
	if l.FencingToken != 77 || l.Value != "10.0.0.1:80" || l.LeaseID != "lease-leader" || !e.IsLeader() {
		t.Fatalf("leadership %+v leader %v", l, e.IsLeader())
	}
	f.mu.Lock()
	opens := append([]*pb.AcquireOpen(nil), f.opens...)
	f.mu.Unlock()
	// UNAVAILABLE is retried inside Lock too: at least 5 attempts.
	if len(opens) < 5 {
		t.Fatalf("%d attempts", len(opens))
	}
	last := opens[len(opens)-1]
	if last.Metadata[ValueKey] != "10.0.0.1:80" || last.Owner != "node-1" ||
		last.Kind != pb.LockKind_LOCK_KIND_EXCLUSIVE || last.WaitTimeout.AsDuration() > 3*time.Second {
		t.Fatalf("last open %v", last)
	}
	if opens[0].WaitTimeout.AsDuration() < 15*time.Second {
		t.Fatalf("first wait %v: should be the time left on ctx", opens[0].WaitTimeout.AsDuration())
	}
	if _, err := e.Campaign(ctx, "again"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("second campaign while leader: %v", err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if e.IsLeader() {
		t.Fatal("leader after resign")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := strings.Join(calls, ",")
		mu.Unlock()
		if got == "elected,resigned" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("callbacks %s", got)
		}
		time.Sleep(10 * time.Millisecond) // the callbacks run on the hold's goroutine
	}
}

func TestCampaignFailsOnlyForTheCallersReasons(t *testing.T) {
	f := &scriptedReplica{}
	f.acquire = func(n int, open *pb.AcquireOpen, st pb.LockService_AcquireServer) error {
		switch open.Name {
		case "denied":
			return status.Error(codes.PermissionDenied, "policy")
		case "capped":
			return status.Error(codes.DeadlineExceeded, "wait_timeout passed")
		}
		return status.Error(codes.InvalidArgument, "metadata value too long")
	}
	c := startScripted(t, f)
	ctx := context.Background()
	if _, err := c.NewElection("denied").Campaign(ctx, "v"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("denied: %v", err)
	}
	if _, err := c.NewElection("other").Campaign(ctx, "v"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("invalid: %v", err)
	}
	if _, err := c.NewElection("x").Campaign(ctx, strings.Repeat("v", 257)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("long value: %v", err)
	}
	f.mu.Lock()
	n := len(f.opens)
	f.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d calls, want 2 (the long value is refused before any)", n)
	}
	// A replica that always ends the wait early: queued again until the
	// caller's own deadline, which is what Campaign reports.
	dctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.NewElection("capped").Campaign(dctx, "v")
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) < 600*time.Millisecond ||
		time.Since(start) > 5*time.Second {
		t.Fatalf("capped: %v after %v", err, time.Since(start))
	}
	f.mu.Lock()
	n = len(f.opens)
	f.mu.Unlock()
	if n < 4 {
		t.Fatalf("capped: only %d calls in all: not queued again", n)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := c.NewElection("capped").Campaign(cctx, "v"); status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestLeadershipFollowsTheHold(t *testing.T) {
	f := &scriptedReplica{}
	events := make(chan *pb.AcquireEvent, 4)
	f.acquire = func(n int, open *pb.AcquireOpen, st pb.LockService_AcquireServer) error {
		return f.grantAndHold(open, 5, st, events)
	}
	f.proclaim = func(r *pb.ProclaimRequest) error {
		if r.FencingToken != 5 {
			return status.Error(codes.FailedPrecondition, "stale token")
		}
		return nil
	}
	c := startScripted(t, f)
	type call struct {
		is  bool
		why string
	}
	calls := make(chan call, 10)
	e := c.NewElection("L", OnLeadership(func(is bool, why string) { calls <- call{is, why} }))
	next := func(want bool, prefix string) {
		t.Helper()
		select {
		case c := <-calls:
			if c.is != want || !strings.HasPrefix(c.why, prefix) {
				t.Fatalf("OnLeadership(%v, %q), want (%v, %q...)", c.is, c.why, want, prefix)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no OnLeadership(%v, %q...)", want, prefix)
		}
	}
	ctx := context.Background()
	if e.IsLeader() {
		t.Fatal("leader before campaigning")
	}
	if err := e.Proclaim(ctx, "x"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("proclaim before campaigning: %v", err)
	}
	if _, err := e.Campaign(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	next(true, "elected")
	if err := e.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	p := f.proclaims[0]
	f.mu.Unlock()
	if p.LeaseId != "lease-L" || p.FencingToken != 5 || len(p.Metadata) != 1 || p.Metadata[ValueKey] != "v2" {
		t.Fatalf("proclaim %v", p)
	}
	if e.Leadership().Value != "v2" {
		t.Fatalf("value %q", e.Leadership().Value)
	}
	// A stale token is the replica's FAILED_PRECONDITION, passed on.
	if err := c.Proclaim(ctx, "lease-L", 4, map[string]string{ValueKey: "x"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale token: %v", err)
	}
	if err := c.Proclaim(ctx, "lease-L", 5, map[string]string{"": "x"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad metadata: %v", err)
	}
	events <- &pb.AcquireEvent{Type: pb.AcquireEvent_SUSPENDED, Detail: &pb.AcquireEvent_Suspended{
		Suspended: &pb.Suspended{SafeFor: durationpb.New(time.Minute)}}}
	next(false, "suspended")
	if e.IsLeader() {
		t.Fatal("leader while suspended")
	}
	events <- &pb.AcquireEvent{Type: pb.AcquireEvent_RESUMED}
	next(true, "resumed")
	if !e.IsLeader() {
		t.Fatal("not leader after RESUMED")
	}
	// A revoke request: the leader steps down by default.
	events <- &pb.AcquireEvent{Type: pb.AcquireEvent_REVOKE_REQUESTED, Detail: &pb.AcquireEvent_RevokeRequested{
		RevokeRequested: &pb.RevokeRequested{Requester: "ops", Reason: "maintenance"}}}
	next(false, "stepped down: revoke requested by ops: maintenance")
	if e.IsLeader() || strings.Join(f.releasedNames(), ",") != "L" {
		t.Fatalf("leader %v released %v", e.IsLeader(), f.releasedNames())
	}

	// A second term, then LOST.
	if _, err := e.Campaign(ctx, "v3"); err != nil {
		t.Fatal(err)
	}
	next(true, "elected")
	events <- &pb.AcquireEvent{Type: pb.AcquireEvent_LOST, Detail: &pb.AcquireEvent_Lost{
		Lost: &pb.Lost{Reason: pb.Lost_DELETED, Message: "released by lease id"}}}
	next(false, "lost: DELETED")
	if e.IsLeader() {
		t.Fatal("leader after LOST")
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatalf("resign after loss: %v", err)
	}
}

func TestLeadershipInDoubtWhenTheReplicaFallsSilent(t *testing.T) {
	f := &scriptedReplica{}
	f.acquire = func(n int, open *pb.AcquireOpen, st pb.LockService_AcquireServer) error {
		st.Send(&pb.AcquireEvent{Type: pb.AcquireEvent_ACQUIRED, Detail: &pb.AcquireEvent_Acquired{
			Acquired: &pb.Acquired{LeaseId: "l", FencingToken: 9, SessionTimeout: durationpb.New(time.Second),
				SafeFor: durationpb.New(600 * time.Millisecond), RefreshWithin: durationpb.New(200 * time.Millisecond)}}})
		<-st.Context().Done() // then silence
		return nil
	}
	c := startScripted(t, f)
	calls := make(chan string, 10)
	e := c.NewElection("L", OnLeadership(func(is bool, why string) {
		if is {
			why = "true " + why
		}
		calls <- why
	}))
	if _, err := e.Campaign(context.Background(), "v"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"true elected", "in doubt", "lost: REFRESH_OVERDUE"} {
		select {
		case got := <-calls:
			if !strings.HasPrefix(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
			if want != "true elected" && e.IsLeader() {
				t.Fatalf("IsLeader after %q", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %q", want)
		}
	}
}

func current(seq uint64, holders ...*pb.Contender) *pb.ObserveEvent {
	return &pb.ObserveEvent{State: pb.ObserveEvent_CURRENT, Name: "L", Sequence: seq, Holders: holders}
}

func leaderC(owner, value string, token uint64) *pb.Contender {
	return &pb.Contender{Owner: owner, Metadata: map[string]string{ValueKey: value}, FencingToken: token, Position: 1}
}

func TestObserveLeaderReobservesAfterUnavailable(t *testing.T) {
	f := &scriptedReplica{}
	f.observe = func(n int, st pb.LockService_ObserveServer) error {
		switch n {
		case 1:
			st.Send(current(1, leaderC("a", "va", 10)))
			st.Send(&pb.ObserveEvent{State: pb.ObserveEvent_CURRENT, Name: "L", Sequence: 2,
				Holders: []*pb.Contender{leaderC("a", "va", 10)}, Waiters: 3}) // waiters only: not a leader change
			return status.Error(codes.Unavailable, "replica draining")
		case 2:
			return status.Error(codes.Unavailable, "still draining")
		case 3:
			st.Send(&pb.ObserveEvent{State: pb.ObserveEvent_UNKNOWN, Name: "L", Sequence: 1, Message: "no ZooKeeper"})
			st.Send(current(2, leaderC("b", "vb", 12)))
			st.Send(current(3))
			<-st.Context().Done()
			return nil
		}
		return status.Error(codes.Internal, "unexpected")
	}
	c := startScripted(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	ch := c.ObserveLeader(ctx, "L")
	next := func() LeaderEvent {
		t.Helper()
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("channel closed")
			}
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
		return LeaderEvent{}
	}
	if ev := next(); ev.Leader == nil || ev.Leader.Owner != "a" || ev.Leader.Value != "va" || ev.Leader.FencingToken != 10 {
		t.Fatalf("first %+v", ev)
	}
	if ev := next(); !ev.Unknown || ev.Leader != nil || !strings.Contains(ev.Message, "draining") {
		t.Fatalf("after the stream failed %+v", ev)
	}
	// The replica's own UNKNOWN is the same state: not repeated.
	if ev := next(); ev.Unknown || ev.Leader == nil || ev.Leader.Owner != "b" || ev.Leader.Value != "vb" {
		t.Fatalf("after re-observing %+v", ev)
	}
	if ev := next(); ev.Unknown || ev.Leader != nil || ev.Err != nil {
		t.Fatalf("no leader %+v", ev)
	}
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("event after cancel")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("channel not closed after cancel")
	}
	f.mu.Lock()
	if f.observes != 3 {
		t.Fatalf("%d observes", f.observes)
	}
	f.mu.Unlock()
}

func TestLeaderOnceAndObserveErrors(t *testing.T) {
	f := &scriptedReplica{}
	f.observe = func(n int, st pb.LockService_ObserveServer) error {
		switch n {
		case 1:
			st.Send(&pb.ObserveEvent{State: pb.ObserveEvent_UNKNOWN, Name: "L", Sequence: 1})
			st.Send(current(2, leaderC("a", "va", 10)))
		case 2:
			st.Send(current(1))
		default:
			return status.Error(codes.PermissionDenied, "policy")
		}
		<-st.Context().Done()
		return nil
	}
	c := startScripted(t, f)
	ctx := context.Background()
	l, err := c.Leader(ctx, "L")
	if err != nil || l.Value != "va" || l.Owner != "a" {
		t.Fatalf("leader %+v %v", l, err)
	}
	if _, err := c.Leader(ctx, "L"); status.Code(err) != codes.NotFound {
		t.Fatalf("no leader: %v", err)
	}
	if _, err := c.Leader(ctx, "L"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("denied: %v", err)
	}
	// A bad name ends the channel with INVALID_ARGUMENT, before any call.
	var last LeaderEvent
	for ev := range c.ObserveLeader(ctx, "") {
		last = ev
	}
	if status.Code(last.Err) != codes.InvalidArgument {
		t.Fatalf("bad name: %+v", last)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.observes != 3 {
		t.Fatalf("%d observes", f.observes)
	}
}
