package redlock

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// The server's replies are sorted by the rule redislock and redlock share:
// a reply a retry may help is ErrUnavailable, any other is not, whichever
// of the two packages reads it.
func TestRepliesSortedAsRedislockAndRedlock(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	for _, c := range []struct {
		reply     string
		transient bool
	}{
		{"NOREPLICAS Not enough good replicas to write.", true},
		{"UNBLOCKED force unblock from blocking operation", true},
		{"CLUSTERDOWN The cluster is down", true},
		{"LOADING Redis is loading the dataset in memory", true},
		{"WRONGTYPE Operation against a key holding the wrong kind of value", false},
		{"BUSYKEY Target key name already exists.", false},
	} {
		err := rdb.Eval(ctx, "return redis.error_reply(ARGV[1])", nil, c.reply).Err()
		if got := classify(ctx, err); errors.Is(got, driver.ErrUnavailable) != c.transient {
			t.Errorf("%q sorted as %v, want transient %v", c.reply, got, c.transient)
		}
	}
	// A client its owner closed cannot come back: retrying is no use.
	if got := classify(ctx, redis.ErrClosed); errors.Is(got, driver.ErrUnavailable) {
		t.Errorf("a closed client sorted as %v, want a permanent error", got)
	}
}
