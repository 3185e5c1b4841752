package redlock

import (
	"context"
	"testing"

	"github.com/distlock/distlock/internal/redis/rediserr/rediserrtest"
)

// The server's replies are sorted by the rule redislock and redlock share:
// a reply a retry may help is ErrUnavailable, any other is not.
func TestRepliesSorted(t *testing.T) {
	rediserrtest.CheckSorted(t, func(err error) error { return classify(context.Background(), err) })
}
