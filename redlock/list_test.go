package redlock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
)

// A lock held on exactly a majority of the nodes is listed even when one
// of its nodes answers a little later than the others (slow, not down).
func TestListWaitsForSlowHolderNode(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 3)
	p := faultproxy.Start(t, srvs[1].Addr)
	b := newBackend(t, []string{srvs[0].Addr, p.Addr(), srvs[2].Addr})
	l, err := b.Acquire(ctx, "slow/held", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := srvs[2].Do("DEL", lockKey("slow/held")); err != nil {
		t.Fatal(err)
	}
	p.Delay(300 * time.Millisecond)
	hs, err := b.List(ctx, "slow/")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Token != l.Token() {
		t.Fatalf("List = %+v while slow/held is held on a majority (token %d)", hs, l.Token())
	}
}
