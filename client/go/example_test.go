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
