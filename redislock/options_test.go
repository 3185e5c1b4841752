package redislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/redislock"
)

// New refuses a bad configuration at once, with an error that says what is
// wrong, rather than a Backend that fails every call.
func TestBadConfiguration(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": closedAddr(t)}})
	t.Cleanup(func() { ring.Close() })
	// A client of another type (a wrapper, say) has no single node to WAIT on.
	var other redis.UniversalClient = struct{ redis.UniversalClient }{newClient(t, closedAddr(t))}
	c := newClient(t, closedAddr(t))
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opt    redislock.Option
		want   string
	}{
		{"nil client", nil, nil, "distlock: invalid option: redislock: nil redis client"},
		{"brace prefix", c, redislock.WithPrefix("a{b}:"), `distlock: invalid option: redislock: prefix "a{b}:" contains a brace`},
		{"short liveness", c, redislock.WithWaiterLiveness(time.Millisecond), "distlock: invalid option: redislock: waiter liveness 1ms is shorter than 30ms"},
		{"ring", ring, nil, "distlock: invalid option: redislock: *redis.Ring is not supported (its shards do not share pub/sub); use one Backend per shard"},
		{"negative replicas", c, redislock.WithWaitReplicas(-1, time.Second), "distlock: invalid option: redislock: negative replica count -1"},
		{"zero replica timeout", c, redislock.WithWaitReplicas(1, 0), "distlock: invalid option: redislock: replica wait timeout 0s is not positive"},
		{"replicas without a node client", other, redislock.WithWaitReplicas(1, time.Second), "distlock: invalid option: redislock: WithWaitReplicas needs a *redis.Client or *redis.ClusterClient, not struct { redis.UniversalClient }"},
	} {
		b, err := redislock.New(tc.client, tc.opt)
		if b != nil || !errors.Is(err, distlock.ErrInvalidOption) || err.Error() != tc.want {
			t.Errorf("%s: New = %v, %v; want nil, %q", tc.name, b, err, tc.want)
		}
	}
}
