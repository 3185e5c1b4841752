package redlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/redlock"
)

// New refuses a bad option with ErrInvalidOption and ignores a nil one; it
// does no I/O, so the nodes need not be up.
func TestOptions(t *testing.T) {
	for name, tc := range map[string]struct {
		opt redlock.Option
		ok  bool
	}{
		"nil":                      {nil, true},
		"request timeout":          {redlock.WithRequestTimeout(time.Second), true},
		"request timeout zero":     {redlock.WithRequestTimeout(0), false},
		"request timeout negative": {redlock.WithRequestTimeout(-time.Second), false},
		"max TTL zero":             {redlock.WithMaxTTL(0), false},
		"prefix with a brace":      {redlock.WithPrefix("a{"), false},
	} {
		t.Run(name, func(t *testing.T) {
			var nodes []redlock.Node
			for range 3 {
				c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
				t.Cleanup(func() { c.Close() })
				nodes = append(nodes, c)
			}
			b, err := redlock.New(nodes, tc.opt)
			if tc.ok {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				b.Close()
				return
			}
			if !errors.Is(err, distlock.ErrInvalidOption) {
				t.Errorf("New: %v, want ErrInvalidOption", err)
			}
		})
	}
}
