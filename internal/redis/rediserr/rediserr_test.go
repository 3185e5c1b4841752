package rediserr_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/internal/redis/rediserr"
	"github.com/distlock/distlock/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Replies is every kind of error reply the rule sorts, as a real server
// sends it (EVAL's redis.error_reply), with whether a retry may help.
var Replies = []struct {
	Reply     string
	Transient bool
}{
	{"LOADING Redis is loading the dataset in memory", true},
	{"READONLY You can't write against a read only replica.", true},
	{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", true},
	{"CLUSTERDOWN The cluster is down", true},
	{"TRYAGAIN Multiple keys request during rehashing of slot", true},
	{"MOVED 3999 127.0.0.1:6381", true},
	{"ASK 3999 127.0.0.1:6381", true},
	{"BUSY Redis is busy running a script.", true},
	{"NOREPLICAS Not enough good replicas to write.", true},
	{"UNBLOCKED force unblock from blocking operation", true},
	{"OOM command not allowed when used memory > 'maxmemory'.", true},
	{"ERR max number of clients reached", true},
	{"ERR max number of clients reachedX", false},
	{"ERR wrong number of arguments for 'set' command", false},
	{"WRONGTYPE Operation against a key holding the wrong kind of value", false},
	{"NOSCRIPT No matching script.", false},
	{"NOPERM this user has no permissions to run the 'eval' command", false},
	{"BUSYKEY Target key name already exists.", false},
	{"BUSYGROUP Consumer Group name already exists", false},
	{"LOADINGX not a prefix of ours", false},
}

// ReplyErr returns the error go-redis gives for reply, as the server sent it.
func ReplyErr(t *testing.T, rdb *redis.Client, reply string) error {
	t.Helper()
	err := rdb.Eval(context.Background(), "return redis.error_reply(ARGV[1])", nil, reply).Err()
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		t.Fatalf("EVAL error_reply(%q) gave %v, not a reply", reply, err)
	}
	return err
}

func TestPermanent(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	for _, r := range Replies {
		if got := rediserr.Permanent(ReplyErr(t, rdb, r.Reply)); got == r.Transient {
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
