// The Go take-home consumer: built outside the repository in GOPATH mode
// against the library put into a GOPATH by client/go/install-gopath.sh and
// Debian's gRPC (tests/take_home/go.sh), it takes the lock "take-home/go",
// prints its fencing token and releases it.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	turnstile "turnstile/client/go"
)

func main() {
	c, err := turnstile.New("127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := c.Lock(ctx, "take-home/go", turnstile.WithWaitTimeout(20*time.Second))
	if err != nil {
		log.Fatalf("lock: %v", err)
	}
	fmt.Printf("fencing_token=%d\n", h.FencingToken())
	if err := h.Unlock(ctx); err != nil {
		log.Fatalf("unlock: %v", err)
	}
}
