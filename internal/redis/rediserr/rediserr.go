// Package rediserr is the one rule by which redislock and redlock tell the
// errors of go-redis worth retrying from those that are not.
package rediserr

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// TransientReplies are the prefixes of the Redis error replies worth
// retrying: the server is loading its data, is a replica or lost its
// master, its cluster is reconfiguring or redirecting the key, a script
// ran too long, too few replicas acknowledged, a blocked client was
// unblocked, or the server is out of memory (keys expire and free it), as
// driver.Sorter sorts a service out of resources.
var TransientReplies = []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "BUSY", "NOREPLICAS", "UNBLOCKED", "OOM"}

// transientMessages are whole generic (ERR) replies worth retrying: the
// server has as many clients as it takes, and one of them may go.
var transientMessages = []string{"max number of clients reached"}

// Permanent reports whether err is one that retrying cannot fix: an error
// reply of the server other than the TransientReplies (a wrong argument, a
// script error, a refused command), or a go-redis client closed by its
// owner. Transport failures and timeouts are not permanent.
func Permanent(err error) bool {
	if errors.Is(err, redis.ErrClosed) {
		return true
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := strings.TrimPrefix(rerr.Error(), "ERR ")
	for _, m := range transientMessages {
		if msg == m {
			return false
		}
	}
	for _, p := range TransientReplies {
		if strings.HasPrefix(msg, p+" ") || msg == p {
			return false
		}
	}
	return true
}
