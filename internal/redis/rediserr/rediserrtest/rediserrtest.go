// Package rediserrtest holds the error replies of a real Redis server that
// the tests of rediserr, redislock and redlock sort, and the check that a
// backend sorts each one by rediserr's rule.
package rediserrtest

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

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

// CheckSorted checks that classify, a backend's sorting of go-redis's
// errors, makes ErrUnavailable of every reply a retry may help, and of no
// other reply, as a real server sends each one; and that it makes a
// client closed by its owner a permanent error.
func CheckSorted(t *testing.T, classify func(error) error) {
	t.Helper()
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	for _, r := range Replies {
		if got := classify(ReplyErr(t, rdb, r.Reply)); errors.Is(got, driver.ErrUnavailable) != r.Transient {
			t.Errorf("%q sorted as %v, want transient %v", r.Reply, got, r.Transient)
		}
	}
	if got := classify(redis.ErrClosed); errors.Is(got, driver.ErrUnavailable) {
		t.Errorf("a closed client sorted as %v, want a permanent error", got)
	}
}
