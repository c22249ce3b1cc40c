package turnstile

import (
	"context"
	"os"
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
	if _, err := b.Describe(ctx, "live/none"); status.Code(err) != codes.NotFound {
		t.Fatalf("describe of nothing: %v", err)
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
		if len(d.Waiters) == 0 {
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
