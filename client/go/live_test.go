package turnstile

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The live tests run against real replicas when tests/go_live_test.py
// starts them (ctest go_client_live_test): TURNSTILE_LIVE_A and _B are two
// replicas' addresses, TURNSTILE_LIVE_MULTI an "ipv4:" target whose first
// address is dead. Without them they are skipped.
func live(t *testing.T) (a, b *Client, multi string) {
	t.Helper()
	addrA, addrB := os.Getenv("TURNSTILE_LIVE_A"), os.Getenv("TURNSTILE_LIVE_B")
	if addrA == "" || addrB == "" {
		t.Skip("no replicas (run tests/go_live_test.py)")
	}
	var err error
	if a, err = New(addrA, WithDefaultOwner("alice")); err != nil {
		t.Fatal(err)
	}
	if b, err = New(addrB, WithDefaultOwner("bob")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, os.Getenv("TURNSTILE_LIVE_MULTI")
}

func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s within 20s", what)
	}
}

func TestLiveDescribeListMetadata(t *testing.T) {
	a, b, _ := live(t)
	ctx := context.Background()
	h, err := a.Lock(ctx, "live/meta", WithMetadata(map[string]string{"job": "42"}), WithWaitTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Unlock(ctx)
	d, err := b.Describe(ctx, "live/meta")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Holders) != 1 || d.Holders[0].Owner != "alice" || d.Holders[0].Metadata["job"] != "42" ||
		d.Holders[0].FencingToken != h.FencingToken() || d.Holders[0].Since.IsZero() {
		t.Fatalf("describe %+v", d)
	}
	names, truncated, err := b.List(ctx, "live/m", 0)
	if err != nil || truncated || len(names) != 1 || names[0] != "live/meta" {
		t.Fatalf("list %v %v %v", names, truncated, err)
	}
	if d, err := b.Describe(ctx, "live/none"); d != nil || err != nil {
		t.Fatalf("describe of a free lock: %v %v, not nil and no error", d, err)
	}
	if h.ValidFor() <= 0 || h.State() != StateHeld {
		t.Fatalf("hold %v valid for %v", h.State(), h.ValidFor())
	}
}

func TestLiveReleaseByLeaseIDLosesDeleted(t *testing.T) {
	a, b, _ := live(t)
	ctx := context.Background()
	h, err := a.Lock(ctx, "live/delete", TryOnce())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, h.LeaseID()); err != nil {
		t.Fatal(err)
	}
	within(t, h.Done(), "loss")
	if h.Lost() != "DELETED" {
		t.Fatalf("lost %q", h.Lost())
	}
	if err := h.Unlock(ctx); status.Code(err) != codes.NotFound {
		t.Fatalf("unlock of a lost hold: %v", err)
	}
	if err := b.Release(ctx, h.LeaseID()); status.Code(err) != codes.NotFound {
		t.Fatalf("second release: %v", err)
	}
	if err := b.Revoke(ctx, h.LeaseID(), "bob", "x"); status.Code(err) != codes.NotFound {
		t.Fatalf("revoke of a gone lease: %v", err)
	}
}

func TestLiveTTLKeepAlive(t *testing.T) {
	a, b, _ := live(t)
	ctx := context.Background()
	h, err := a.Lock(ctx, "live/ttl", WithTTL(time.Second), TryOnce())
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.KeepAlive(ctx, h.LeaseID())
	if err != nil || len(st) != 1 || st[0].Code != codes.OK || st[0].ValidFor <= 0 {
		t.Fatalf("keepalive %+v %v", st, err)
	}
	// Held past 3 TTLs: the library renews it.
	select {
	case <-h.Done():
		t.Fatalf("lost %s", h.Lost())
	case <-time.After(3 * time.Second):
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = b.KeepAlive(ctx, h.LeaseID())
	if err != nil || len(st) != 1 || st[0].Code != codes.NotFound {
		t.Fatalf("keepalive after unlock %+v %v", st, err)
	}
}

func TestLiveRevokeHoldersAndQueue(t *testing.T) {
	a, b, _ := live(t)
	ctx := context.Background()
	asked := make(chan [2]string, 1)
	h, err := a.Lock(ctx, "live/revoke", TryOnce(),
		OnRevoke(func(req, why string) { asked <- [2]string{req, why} }))
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan int64, 10)
	got := make(chan *Hold, 1)
	go func() {
		w, err := b.Lock(ctx, "live/revoke", WithWaitTimeout(20*time.Second), WithRevokeHolders("my turn"),
			OnQueued(func(p int64) { queued <- p }))
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	select {
	case r := <-asked:
		if r != [2]string{"bob", "my turn"} {
			t.Fatalf("revoke %v", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no revoke request")
	}
	if p := <-queued; p != 1 {
		t.Fatalf("position %d", p)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil || w.FencingToken() <= h.FencingToken() {
		t.Fatal("the waiter did not hold after the release")
	}
	w.Unlock(ctx)
}

func TestLiveCancelledWaitLeavesNoNode(t *testing.T) {
	a, b, _ := live(t)
	ctx := context.Background()
	h, err := a.Lock(ctx, "live/cancel", TryOnce())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Unlock(ctx)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.Lock(cctx, "live/cancel", WithWaitTimeout(time.Minute), OnQueued(func(int64) { cancel() }))
		done <- err
	}()
	select {
	case err := <-done:
		if status.Code(err) != codes.Canceled {
			t.Fatalf("cancelled wait: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled wait did not return")
	}
	// The replica deletes the waiter's node once the stream is cancelled.
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := a.Describe(ctx, "live/cancel")
		if err != nil {
			t.Fatal(err)
		}
		if d == nil || len(d.Waiters) == 0 { // nil: free
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiters left: %+v", d.Waiters)
		}
		time.Sleep(50 * time.Millisecond) // polling the server's view: no event to wait on
	}
}

func TestLiveSemaphoreAndShared(t *testing.T) {
	a, b, _ := live(t)
	ctx := context.Background()
	p1, err := a.Lock(ctx, "live/pool", Semaphore(2), TryOnce())
	if err != nil {
		t.Fatal(err)
	}
	p2, err := b.Lock(ctx, "live/pool", Semaphore(2), TryOnce())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, "live/pool", Semaphore(2), TryOnce()); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("third permit: %v", err)
	}
	d, err := a.Describe(ctx, "live/pool")
	if err != nil || d.MaxHolders != 2 || len(d.Holders) != 2 || d.Holders[0].Kind != KindSemaphore {
		t.Fatalf("describe %+v %v", d, err)
	}
	p1.Unlock(ctx)
	p2.Unlock(ctx)
	r1, err := a.Lock(ctx, "live/rw", Shared(), TryOnce())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.Lock(ctx, "live/rw", Shared(), TryOnce())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, "live/rw", TryOnce()); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("writer while read-held: %v", err)
	}
	r1.Unlock(ctx)
	r2.Unlock(ctx)
}

func TestLiveMultiAddressTargetWithADeadReplica(t *testing.T) {
	_, _, multi := live(t)
	if multi == "" {
		t.Skip("no multi-address target")
	}
	c, err := New(multi)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		h, err := c.Lock(ctx, "live/multi", WithWaitTimeout(10*time.Second))
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLiveLockDelay(t *testing.T) {
	a, b, _ := live(t)
	ctx := context.Background()
	h, err := a.Lock(ctx, "live/delay", WithLockDelay(2*time.Second), TryOnce())
	if err != nil {
		t.Fatal(err)
	}
	// Someone else releases it by lease id: an involuntary end, so the
	// next grant waits the lock-delay.
	if err := b.Release(ctx, h.LeaseID()); err != nil {
		t.Fatal(err)
	}
	within(t, h.Done(), "loss")
	start := time.Now()
	w, err := b.Lock(ctx, "live/delay", WithWaitTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("granted %v after an involuntary end with a 2s lock-delay", d)
	}
	w.Unlock(ctx)
}

// nextLeader reads the next leader event, failing after 20 s.
func nextLeader(t *testing.T, ch <-chan LeaderEvent) LeaderEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the observer's channel closed")
		}
		if ev.Err != nil {
			t.Fatalf("observe: %v", ev.Err)
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no leader event within 20s")
	}
	return LeaderEvent{}
}

// awaitLeader reads leader events until one satisfies ok (unknown and
// intermediate states are skipped), failing after 20 s.
func awaitLeader(t *testing.T, ch <-chan LeaderEvent, what string, ok func(*Leader) bool) *Leader {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ev := nextLeader(t, ch)
		if !ev.Unknown && ok(ev.Leader) {
			return ev.Leader
		}
	}
	t.Fatalf("observers never saw %s", what)
	return nil
}

func TestLiveElectionCampaignObserveProclaim(t *testing.T) {
	a, b, _ := live(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	const name = "live/election"
	obs := b.ObserveLeader(ctx, name)
	if ev := nextLeader(t, obs); ev.Unknown || ev.Leader != nil {
		t.Fatalf("before any campaign: %+v", ev)
	}
	calls := make(chan bool, 10)
	e := a.NewElection(name, OnLeadership(func(is bool, why string) { calls <- is }))
	l, err := e.Campaign(ctx, "10.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	if !e.IsLeader() || l.FencingToken == 0 || l.Value != "10.0.0.1:8080" {
		t.Fatalf("leadership %+v leader %v", l, e.IsLeader())
	}
	if is := <-calls; !is {
		t.Fatal("OnLeadership(false) first")
	}
	seen := awaitLeader(t, obs, "the leader", func(x *Leader) bool { return x != nil })
	if seen.Value != "10.0.0.1:8080" || seen.Owner != "alice" || seen.FencingToken != l.FencingToken {
		t.Fatalf("observed %+v, leadership %+v", seen, l)
	}
	// Proclaim: the observers see the new value, same term.
	if err := e.Proclaim(ctx, "10.0.0.2:8080"); err != nil {
		t.Fatal(err)
	}
	seen = awaitLeader(t, obs, "the proclaimed value", func(x *Leader) bool { return x == nil || x.Value != "10.0.0.1:8080" })
	if seen == nil || seen.Value != "10.0.0.2:8080" || seen.FencingToken != l.FencingToken {
		t.Fatalf("after proclaim observed %+v", seen)
	}
	got, err := b.Leader(ctx, name)
	if err != nil || got.Value != "10.0.0.2:8080" || got.FencingToken != l.FencingToken {
		t.Fatalf("Leader: %+v %v", got, err)
	}
	d, err := b.Describe(ctx, name)
	if err != nil || len(d.Holders) != 1 || d.Holders[0].Metadata[ValueKey] != "10.0.0.2:8080" {
		t.Fatalf("describe %+v %v", d, err)
	}
	// A stale token is refused and changes nothing.
	if err := b.Proclaim(ctx, l.LeaseID, l.FencingToken+1, map[string]string{ValueKey: "evil"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("proclaim with a wrong token: %v", err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if e.IsLeader() {
		t.Fatal("leader after Resign")
	}
	if is := <-calls; is {
		t.Fatal("no OnLeadership(false) after Resign")
	}
	awaitLeader(t, obs, "no leader after Resign", func(x *Leader) bool { return x == nil })
	// The released lease is gone: NOT_FOUND, from the election and by id.
	if err := e.Proclaim(ctx, "late"); status.Code(err) != codes.NotFound {
		t.Fatalf("proclaim after resign: %v", err)
	}
	if err := b.Proclaim(ctx, l.LeaseID, l.FencingToken, map[string]string{ValueKey: "late"}); status.Code(err) != codes.NotFound {
		t.Fatalf("proclaim of a released lease: %v", err)
	}
	if _, err := b.Leader(ctx, name); status.Code(err) != codes.NotFound {
		t.Fatalf("Leader with none: %v", err)
	}
	// A second term: an earlier term's token is stale for the new lease.
	l2, err := e.Campaign(ctx, "v2")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Resign(ctx)
	if l2.FencingToken <= l.FencingToken {
		t.Fatalf("term %d after %d", l2.FencingToken, l.FencingToken)
	}
	if err := b.Proclaim(ctx, l2.LeaseID, l.FencingToken, map[string]string{ValueKey: "old"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("proclaim with the previous term's token: %v", err)
	}
	// (A new observer on another replica gets that replica's latest view,
	// which may lag a change made elsewhere by a notification delay: wait
	// for it on the open stream, then ask ZooKeeper's view.)
	awaitLeader(t, obs, "the second term", func(x *Leader) bool { return x != nil && x.FencingToken == l2.FencingToken })
	if got, err := b.Leader(ctx, name); err != nil || got.Value != "v2" || got.FencingToken != l2.FencingToken {
		t.Fatalf("Leader in the second term: %+v %v", got, err)
	}
	d, err = a.Describe(ctx, name)
	if err != nil || len(d.Holders) != 1 || d.Holders[0].Metadata[ValueKey] != "v2" {
		t.Fatalf("the refused proclaims changed the value: %+v %v", d, err)
	}
}

// waitersOf is how many wait on a lock (0 if nobody holds or waits).
func waitersOf(t *testing.T, c *Client, name string) int {
	t.Helper()
	d, err := c.Describe(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if d == nil {
		return 0
	}
	return len(d.Waiters)
}

// untilWaiters polls Describe (no event to wait on) until n wait.
func untilWaiters(t *testing.T, c *Client, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for waitersOf(t, c, name) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never %d waiters", name, n)
		}
		time.Sleep(20 * time.Millisecond) // polling the server's view: no event to wait on
	}
}

func TestLiveResignHandsLeadershipOnInOrder(t *testing.T) {
	// Once flaky (1 run in 4 saw no event for "two"): a waiter giving up
	// removed the observer's data watch on the same session (fixed in the
	// server; observe_test covers it). 230 runs under CPU load pass.
	a, b, _ := live(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	name := fmt.Sprintf("live/handover-%d", time.Now().UnixNano()) // fresh with -count N
	obs := a.ObserveLeader(ctx, name)
	e1 := a.NewElection(name, CandidateOwner("first"))
	e2 := b.NewElection(name, CandidateOwner("second"))
	e3 := a.NewElection(name, CandidateOwner("third"))
	l1, err := e1.Campaign(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *Leadership
		err error
	}
	r2, r3 := make(chan result, 1), make(chan result, 1)
	go func() { l, err := e2.Campaign(ctx, "two"); r2 <- result{l, err} }()
	untilWaiters(t, a, name, 1)
	go func() { l, err := e3.Campaign(ctx, "three"); r3 <- result{l, err} }()
	untilWaiters(t, a, name, 2)
	if e2.IsLeader() || e3.IsLeader() {
		t.Fatal("a waiting candidate says it leads")
	}
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	res2 := <-r2
	if res2.err != nil || !e2.IsLeader() || e3.IsLeader() {
		t.Fatalf("second: %v leader %v, third leader %v", res2.err, e2.IsLeader(), e3.IsLeader())
	}
	// An observer gets the latest state, not every intermediate one (the
	// proto says so): wait until it has seen "two" before the next change,
	// or a quick second handover may be coalesced into one.
	var order []string
	see := func(want string) {
		for len(order) == 0 || order[len(order)-1] != want {
			ev := nextLeader(t, obs)
			if ev.Leader != nil {
				t.Logf("event unknown=%v leader=%s/%d", ev.Unknown, ev.Leader.Value, ev.Leader.FencingToken)
			} else {
				t.Logf("event unknown=%v no leader", ev.Unknown)
			}
			if ev.Unknown || ev.Leader == nil {
				continue
			}
			if len(order) == 0 || order[len(order)-1] != ev.Leader.Value {
				order = append(order, ev.Leader.Value)
			}
			if len(order) > 3 {
				t.Fatalf("observed leaders %s", strings.Join(order, ","))
			}
		}
	}
	see("two")
	if err := e2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	res3 := <-r3
	if res3.err != nil || !e3.IsLeader() {
		t.Fatalf("third: %v", res3.err)
	}
	defer e3.Resign(ctx)
	if !(l1.FencingToken < res2.l.FencingToken && res2.l.FencingToken < res3.l.FencingToken) {
		t.Fatalf("terms %d %d %d", l1.FencingToken, res2.l.FencingToken, res3.l.FencingToken)
	}
	// The observer saw the leaders one after the other, in order (a
	// momentary "no leader" between two is allowed).
	see("three")
	if got := strings.Join(order, ","); got != "one,two,three" {
		t.Fatalf("observed leaders %s", got)
	}
}

func TestLiveCampaignQueuesAgainThroughACappedReplica(t *testing.T) {
	a, _, _ := live(t)
	capped := os.Getenv("TURNSTILE_LIVE_CAPPED")
	if capped == "" {
		t.Skip("no replica with a short --max-wait-timeout")
	}
	c, err := New(capped, WithDefaultOwner("patient"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	const name = "live/capped-election"
	first := a.NewElection(name)
	if _, err := first.Campaign(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	// The replica refuses waits above 2 s: a plain Lock says so.
	if _, err := c.Lock(ctx, name, WithWaitTimeout(10*time.Second)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a 10 s wait on the capped replica: %v", err)
	}
	patient := c.NewElection(name)
	done := make(chan error, 1)
	start := time.Now()
	go func() { _, err := patient.Campaign(ctx, "second"); done <- err }()
	// Held past two of the replica's caps, then resigned.
	select {
	case err := <-done:
		t.Fatalf("campaign ended while the lock was held: %v", err)
	case <-time.After(5 * time.Second):
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("campaign: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("not elected within 20 s of the resign")
	}
	if !patient.IsLeader() || time.Since(start) < 5*time.Second {
		t.Fatalf("leader %v after %v", patient.IsLeader(), time.Since(start))
	}
	if got, err := a.Leader(ctx, name); err != nil || got.Value != "second" || got.Owner != "patient" {
		t.Fatalf("leader %+v %v", got, err)
	}
	patient.Resign(ctx)
	// The caller's own deadline still ends a campaign, with DEADLINE_EXCEEDED.
	if _, err := first.Campaign(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	defer first.Resign(ctx)
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	defer scancel()
	if _, err := patient.Campaign(sctx, "late"); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("campaign past its deadline: %v", err)
	}
	untilWaiters(t, a, name, 0)
}

func TestLiveAcquireAllNeverDeadlocks(t *testing.T) {
	a, b, _ := live(t)
	sets := [][]string{
		{"live/all/x", "live/all/y"},
		{"live/all/z", "live/all/y"},
		{"live/all/x", "live/all/z"},
		{"live/all/z", "live/all/x", "live/all/y"},
	}
	var mu sync.Mutex
	holders := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i, set := range sets {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Add(1)
		go func(c *Client, set []string) {
			defer wg.Done()
			for round := 0; round < 5; round++ {
				start := time.Now()
				m, err := c.AcquireAll(context.Background(), set, WithWaitTimeout(15*time.Second))
				if took := time.Since(start); took > 17*time.Second {
					errs <- fmt.Errorf("%v: took %v", set, took)
				}
				if err != nil {
					errs <- fmt.Errorf("%v: %v", set, err)
					return
				}
				mu.Lock()
				for _, n := range set {
					holders[n]++
					if holders[n] > 1 {
						errs <- fmt.Errorf("%s held twice", n)
					}
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // the work done under the locks
				mu.Lock()
				for _, n := range set {
					holders[n]--
				}
				mu.Unlock()
				if err := m.Release(context.Background()); err != nil {
					errs <- err
				}
			}
		}(c, set)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	within(t, done, "the end of every AcquireAll")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestLiveFailedAcquireAllLeavesNothingHeld(t *testing.T) {
	a, b, _ := live(t)
	ctx := context.Background()
	h, err := a.Lock(ctx, "live/set/b", TryOnce())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Unlock(ctx)
	set := []string{"live/set/c", "live/set/a", "live/set/b"}
	start := time.Now()
	_, err = b.AcquireAll(ctx, set, WithWaitTimeout(time.Second))
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "live/set/b") {
		t.Fatalf("AcquireAll with b held: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v for a 1 s deadline", took)
	}
	if _, err := b.AcquireAll(ctx, set, TryOnce()); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("try-once AcquireAll with b held: %v", err)
	}
	for _, n := range []string{"live/set/a", "live/set/c"} {
		if d, err := a.Describe(ctx, n); err != nil || d != nil { // nil: free
			t.Fatalf("%s after the failed AcquireAll: %+v %v", n, d, err)
		}
	}
	d, err := a.Describe(ctx, "live/set/b")
	if err != nil || len(d.Holders) != 1 || d.Holders[0].FencingToken != h.FencingToken() || len(d.Waiters) != 0 {
		t.Fatalf("live/set/b: %+v %v", d, err)
	}
	h.Unlock(ctx)

	// Whole: each its own token; losing one (released by lease id) ends the
	// set and the library lets go of the rest.
	m, err := b.AcquireAll(ctx, set, TryOnce())
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[uint64]bool{}
	for _, n := range set {
		d, err := a.Describe(ctx, n)
		if err != nil || len(d.Holders) != 1 || d.Holders[0].FencingToken != m.FencingToken(n) {
			t.Fatalf("%s: %+v %v", n, d, err)
		}
		tokens[m.FencingToken(n)] = true
	}
	if len(tokens) != 3 || !m.Held() {
		t.Fatalf("tokens %v held %v", tokens, m.Held())
	}
	if err := a.Release(ctx, m.Hold("live/set/a").LeaseID()); err != nil {
		t.Fatal(err)
	}
	within(t, m.Done(), "the set's end")
	if !strings.Contains(m.Lost(), "DELETED") || m.Held() {
		t.Fatalf("lost %q", m.Lost())
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range set {
		for {
			d, err := a.Describe(ctx, n)
			if err == nil && d == nil { // free
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still held after the set broke: %v", n, err)
			}
			time.Sleep(20 * time.Millisecond) // polling the server's view: no event to wait on
		}
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
