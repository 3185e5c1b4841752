// Package gatewaylock is a distlock.Backend that takes its locks from a
// distlock gateway (`distlock serve`, package gateway) over HTTP, so that
// Go programs share the gateway's locks with programs in other languages.
//
//	b, err := gatewaylock.OpenURL(ctx, "distlock+http://127.0.0.1:7420")
//	if err != nil {
//		return err
//	}
//	defer b.Close()
//	client, err := distlock.New(b)
//
// Each grant lives in a gateway session of its own, created by Acquire
// with the grant's TTL and owner, kept alive by Refresh (a keepalive) and
// deleted by Release. The validity of a grant is the time left that the
// gateway reports, from the send time of the request it answered, so the
// Client's local deadline never outlasts what the gateway vouches for.
// The backend never calls OnLost: a loss shows at the next renewal (a
// gateway whose sessions ended, or that refuses the connection, having
// gone away with them), and the Client's local deadline covers the time
// between.
//
// A blocking Acquire waits in the gateway (a long-poll of at most
// WithMaxWait, repeated), which waits on the lock service's own signal.
// An Acquire that fails deletes its session, which releases a grant whose
// answer was lost; if the gateway cannot be reached, the session expires
// after its TTL.
//
// The Backend is a distlock.Lister (GET /v1/locks), so that `distlock
// status --backend distlock+http://...` lists the locks through a gateway.
package gatewaylock
