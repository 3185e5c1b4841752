package rediserr_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/internal/redis/rediserr"
	"github.com/distlock/distlock/internal/redis/rediserr/rediserrtest"
	"github.com/distlock/distlock/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPermanent(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	for _, r := range rediserrtest.Replies {
		if got := rediserr.Permanent(rediserrtest.ReplyErr(t, rdb, r.Reply)); got == r.Transient {
			t.Errorf("Permanent(%q) = %v, want %v", r.Reply, got, !r.Transient)
		}
	}
	if rediserr.Permanent(errors.New("dial tcp: connection refused")) {
		t.Errorf("a transport error is permanent")
	}
	if !rediserr.Permanent(redis.ErrClosed) {
		t.Errorf("a closed client is not permanent")
	}
}
