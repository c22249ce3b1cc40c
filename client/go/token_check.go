package turnstile

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "turnstile/client/go/turnstilepb"
)

// TokenVerdict is CheckToken's answer about one fencing token.
type TokenVerdict int

const (
	// TokenCurrent: a hold of the lock with this token exists (for a shared
	// lock or a semaphore: one of its holders).
	TokenCurrent TokenVerdict = iota + 1
	// TokenSuperseded: no hold has this token (released, lost, expired, or
	// never existed); the lock's current or a later holder has a higher one.
	// A superseded token never becomes current again: refuse the write.
	TokenSuperseded
	// TokenWaiting: the token names a contender that still waits and was
	// never granted (no client is handed such a token). Refuse the write.
	TokenWaiting
)

func (v TokenVerdict) String() string {
	switch v {
	case TokenCurrent:
		return "CURRENT"
	case TokenSuperseded:
		return "SUPERSEDED"
	case TokenWaiting:
		return "WAITING"
	}
	return "UNSPECIFIED"
}

// TokenCheck is CheckToken's answer.
type TokenCheck struct {
	Verdict TokenVerdict
	// The highest fencing token among the lock's holders when the replica
	// read it (0 if the lock had none).
	HighestHolderToken uint64
	// False when AllowStale let the replica skip ZooKeeper's sync.
	Linearizable bool
}

// CheckOption is an option of CheckToken.
type CheckOption func(*pb.CheckTokenRequest)

// AllowStale accepts the view of the ZooKeeper server the replica is
// connected to, without a sync through the leader: cheaper, but it may miss
// changes of the last moments (up to ZooKeeper's syncLimit x tickTime for a
// follower cut off from its leader; see lock.proto's CheckToken).
func AllowStale() CheckOption { return func(r *pb.CheckTokenRequest) { r.AllowStale = true } }

// CheckToken asks whether fencingToken still belongs to a hold of the lock
// `name` (Chubby's CheckSequencer), for a resource server that cannot
// remember the highest token it has seen: accept a write only when the
// verdict is TokenCurrent. By default the answer is linearizable (it
// reflects every grant and release announced before the call). Errors
// carry a status.Code: INVALID_ARGUMENT (empty or malformed name, token 0),
// PERMISSION_DENIED (policy action `describe`), UNAVAILABLE (the replica
// cannot read ZooKeeper: the answer is unknown, so refuse the write or ask
// again; it is retried like Describe within the call's deadline).
func (c *Client) CheckToken(ctx context.Context, name string, fencingToken uint64, opts ...CheckOption) (*TokenCheck, error) {
	req := &pb.CheckTokenRequest{Name: name, FencingToken: fencingToken}
	for _, f := range opts {
		f(req)
	}
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	var r *pb.CheckTokenResponse
	err := c.retryUnary(ctx, func(ctx context.Context) (err error) {
		r, err = c.stub.CheckToken(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := &TokenCheck{HighestHolderToken: r.HighestHolderToken, Linearizable: r.Linearizable}
	switch r.Verdict {
	case pb.CheckTokenResponse_CURRENT:
		out.Verdict = TokenCurrent
	case pb.CheckTokenResponse_SUPERSEDED:
		out.Verdict = TokenSuperseded
	case pb.CheckTokenResponse_WAITING:
		out.Verdict = TokenWaiting
	default: // a verdict this library does not know: no answer it can act on
		return nil, status.Errorf(codes.Unknown, "CheckToken: unknown verdict %v", r.Verdict)
	}
	return out, nil
}
