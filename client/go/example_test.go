package turnstile_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	turnstile "turnstile/client/go"
)

// Takes a lock, fences the work with its token, and stops if the hold is
// lost. (Compiled, not run: it needs a replica.)
func ExampleClient_Lock() {
	c, err := turnstile.New("127.0.0.1:7400", turnstile.WithDefaultOwner("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	h, err := c.Lock(ctx, "reports/daily",
		turnstile.WithWaitTimeout(30*time.Second),
		turnstile.WithTTL(10*time.Second),
		turnstile.OnRevoke(func(requester, reason string) { log.Printf("%s asks: %s", requester, reason) }))
	switch status.Code(err) {
	case codes.OK:
	case codes.DeadlineExceeded:
		log.Fatal("someone else held it for 30 s")
	default:
		log.Fatal(err)
	}
	fmt.Println("fencing token", h.FencingToken())
	select {
	case <-time.After(time.Second): // the work
	case <-h.Done():
		log.Fatalf("lost: %s", h.Lost())
	}
	if err := h.Unlock(ctx); err != nil {
		log.Print(err)
	}
}

// Campaigns for leadership, works while leader, and follows who leads.
// (Compiled, not run: it needs a replica.)
func ExampleElection() {
	c, err := turnstile.New("ipv4:10.0.0.1:7400,10.0.0.2:7400", turnstile.WithDefaultOwner("node-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	e := c.NewElection("orders/leader", turnstile.OnLeadership(func(leader bool, why string) {
		log.Printf("leader=%v (%s)", leader, why) // false at once when in doubt or lost
	}))
	l, err := e.Campaign(ctx, "10.0.0.7:8080") // blocks until elected
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("term", l.FencingToken)
	_ = e.Proclaim(ctx, "10.0.0.7:9090") // a new value, same term
	_ = e.Resign(ctx)

	// Anyone can follow the leader.
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for ev := range c.ObserveLeader(octx, "orders/leader") {
		switch {
		case ev.Err != nil:
			log.Fatal(ev.Err)
		case ev.Unknown:
			fmt.Println("leader unknown:", ev.Message)
		case ev.Leader == nil:
			fmt.Println("no leader")
		default:
			fmt.Println("leader", ev.Leader.Value, "term", ev.Leader.FencingToken)
		}
	}
}

// Takes two accounts' locks all-or-nothing (in byte order, so two
// transfers never deadlock). (Compiled, not run: it needs a replica.)
func ExampleClient_AcquireAll() {
	c, err := turnstile.New("127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	m, err := c.AcquireAll(ctx, []string{"account/42", "account/7"}, turnstile.WithWaitTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err) // nothing is held
	}
	defer m.Release(ctx)
	fmt.Println(m.FencingToken("account/7"), m.FencingToken("account/42"))
	select {
	case <-m.Done():
		log.Fatalf("set broken: %s", m.Lost())
	case <-time.After(time.Second): // the transfer
	}
}
