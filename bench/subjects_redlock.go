package bench

import (
	"context"
	"errors"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/redlock"
)

// The Redlock rows: distlock's redlock over the first n of the Env's Redis
// servers, through distlock.Client.
var (
	distlockRedlock5Subject = Subject{
		ID: "distlock-redlock", Name: "distlock Redlock (5 nodes)", Service: SvcRedlock, Kind: KindDistlock,
		Settings: "redlock defaults over 5 independent Redis servers (quorum 3): TTL 15s, renewal every 5s, the acquire script on every node in parallel, " +
			"per-node timeout a tenth of the TTL; fencing token across grants; a waiter queues on every node (one wake channel per process) and a release wakes the first live waiter, keeping the nodes it frees for it for up to 250ms",
		Measures: Latency | Throughput | Contention | Election | Semaphore,
		Open:     func(e *Env) (Locker, error) { return openDistlockRedlock(e, 5) },
		Counters: redisCounters(5),
	}
	distlockRedlock1Subject = Subject{
		ID: "distlock-redlock-1", Name: "distlock Redlock (1 node)", Service: SvcRedlock, Kind: KindDistlock,
		Settings: "diagnostic: the same package over the first of those servers alone (quorum 1), the cost of the algorithm without the fan-out",
		Measures: Latency,
		Open:     func(e *Env) (Locker, error) { return openDistlockRedlock(e, 1) },
		Counters: redisCounters(1),
	}
)

// redlockClient is a counted go-redis client of addr with
// ContextTimeoutEnabled, which redlock.New requires so that its per-node
// timeout bounds every request; dial, when not nil, dials its
// connections.
func (e *Env) redlockClient(addr string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, Dialer: dial})
	c.AddHook(counter{n: &e.sent, by: &e.sentBy})
	return c
}

func openDistlockRedlock(e *Env, n int) (Locker, error) { return openRedlockDialed(e, n, nil) }

// openRedlockDialed is a Redlock row's instance over the first n of the
// Env's Redis servers, whose connections dial dials (nil: go-redis's own
// dialer).
func openRedlockDialed(e *Env, n int, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (Locker, error) {
	var clients []*redis.Client
	var nodes []redlock.Node
	for _, addr := range e.Redis(n) {
		c := e.redlockClient(addr, dial)
		clients = append(clients, c)
		nodes = append(nodes, c)
	}
	closeClients := func() error {
		var errs []error
		for _, c := range clients {
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
	b, err := redlock.New(nodes)
	if err != nil {
		return nil, errors.Join(err, closeClients())
	}
	return newDistlockLocker(b, false, func() error { return errors.Join(b.Close(), closeClients()) })
}
