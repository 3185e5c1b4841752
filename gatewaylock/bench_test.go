package gatewaylock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/gatewaylock"
	"github.com/distlock/distlock/memlock"
)

// BenchmarkCycle is an uncontended acquire and release, straight on a
// backend and through a gateway over it (HTTP/1.1 keep-alive on
// loopback): on the file backend, whose grant syncs its token counter to
// disk, and on memlock, where the cycle is the gateway's own cost.
func BenchmarkCycle(b *testing.B) {
	fb, err := filelock.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	mb := memlock.New()
	through := func(be driver.Backend) driver.Backend {
		gb, err := gatewaylock.New(serveB(b, be))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { gb.Close() })
		return gb
	}
	for _, c := range []struct {
		name string
		be   driver.Backend
	}{{"file/direct", fb}, {"file/gateway", through(fb)}, {"mem/direct", mb}, {"mem/gateway", through(mb)}} {
		name, be := c.name, c.be
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				l, err := be.Acquire(ctx, "bench", driver.AcquireOptions{TTL: 10 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
