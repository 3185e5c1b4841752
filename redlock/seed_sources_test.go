package redlock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// markerFlip is a hook of a node's client that sets the node's seed
// marker to to (or deletes it, for "") when the node is sent a SCAN:
// between a copy's first read of a source's marker and its read of the
// counters with the marker again.
type markerFlip struct {
	set func(ctx context.Context) error
}

func (h markerFlip) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h markerFlip) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h markerFlip) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			if err := h.set(ctx); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// A copy reads its sources' counters with their seed marker, and drops a
// source whose marker changed since the read began: it may have lost its
// data meanwhile. A copied source that starts to vote ("c:<due>", then
// "ok") kept its counters, and counts, as long as the read is too short
// for a loss and a new wait to fit in (settleWindow); one that lost its
// data again does not.
func TestCopySources(t *testing.T) {
	for _, tc := range []struct {
		name  string
		to    string // node 1's marker once its keys are listed; "" deletes it
		reads bool   // whether node 1 counts
	}{
		{"copied, then voting", "ok", true},
		{"copied, then lost", "", false},
		{"copied, then waiting anew", "p:1:2:3", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			srvs, b := threeNodeBackend(t)
			token := b.keysFor("sources/k").token
			for i, m := range []string{"ok", "c:99999999999999"} {
				if _, err := srvs[i].Do("MSET", b.marker(), m, token, []string{"5", "9"}[i]); err != nil {
					t.Fatal(err)
				}
			}
			c := b.nodes[1].(*redis.Client)
			var flips atomic.Int32
			c.AddHook(markerFlip{set: func(ctx context.Context) error {
				flips.Add(1)
				if tc.to == "" {
					return c.Del(ctx, b.marker()).Err()
				}
				return c.Set(ctx, b.marker(), tc.to, 0).Err()
			}})
			// Only a read shorter than settleWindow tells: a longer one
			// drops node 1 whatever its marker says. Such runs (a loaded
			// machine) are tried again, with node 1 copied again.
			for {
				start := time.Now()
				counters, ok := b.readCounters(ctx, []int{0, 1})
				took := time.Since(start)
				if flips.Load() == 0 {
					t.Fatal("the copy listed no keys on node 1")
				}
				switch {
				case !tc.reads && ok:
					t.Fatalf("node 1 counted after its marker went from c: to %q: %v", tc.to, counters)
				case !tc.reads:
					return
				case ok && counters[token] == 9:
					return
				case ok:
					t.Fatalf("counters %v, want %s at 9", counters, token)
				case took < settleWindow:
					t.Fatalf("node 1 did not count after its marker went from c: to %q, in a read of %v", tc.to, took)
				case ctx.Err() != nil:
					t.Fatalf("every read took settleWindow or more (the last %v)", took)
				}
				if _, err := srvs[1].Do("SET", b.marker(), "c:99999999999999"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
