package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

// A re-seeding that saw a node due, but whose copy arrives after the node
// was seeded by someone else, voted, lost its data again and started a
// new wait, must not end that new wait: the node would vote at once,
// without the grants and counters it lost the second time. Here the node
// held A's grant when it lost its data; the late copy of the first wait
// made it vote again, and a second client was granted the key while A
// held it.
func TestSeedOfAnEarlierWaitDoesNotEndALaterOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 5 * time.Second
	srvs, b := threeNodeBackend(t, WithMaxTTL(ttl))
	nodes := b.nodes
	for _, s := range srvs {
		if _, err := s.Do("SET", b.marker(), "ok"); err != nil {
			t.Fatal(err)
		}
	}
	// Node 0 lost its data: its wait starts now, and is over at once.
	if _, err := srvs[0].Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if _, err := markScript.Run(ctx, nodes[0], []string{b.marker()}, 0, 0).Int64(); err != nil {
		t.Fatal(err)
	}
	// One round that sees node 0 due: the stale round, whose copy comes
	// late. The probe's grants on the other nodes do not matter.
	probe := b.keysFor("probe")
	var stale round
	for {
		votes := each(ctx, b, nil, time.Second, func(ctx context.Context, n Node) (vote, error) {
			res, err := acquireScript.Run(ctx, n, []string{probe.lock, probe.token, probe.tomb("p"), b.marker(), probe.queue, probe.waiting, probe.woken, probe.watched}, "p", 1000, "probe", 0, "", 0, "0").Int64Slice()
			if err != nil {
				return vote{}, err
			}
			return vote{status: res[0], val: res[1]}, nil
		})
		if stale = countVotes(votes); len(stale.due) == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("node 0 never became due: %v", stale.why)
		}
	}
	// Another client seeds node 0 from the same wait; it votes for A.
	if !b.seed(ctx, stale) {
		t.Fatal("node 0 was not seeded")
	}
	key := "seed/episode"
	k := b.keysFor(key)
	if _, err := srvs[2].Do("SET", k.lock, "other|1|0|other", "PX", "60000"); err != nil {
		t.Fatal(err)
	}
	a, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	if _, err := srvs[2].Do("DEL", k.lock); err != nil {
		t.Fatal(err)
	}
	// Node 0 loses its data again, with A's grant, and starts a new wait
	// (its counters may be copied at once; it votes after the TTL).
	if _, err := srvs[0].Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if _, err := markScript.Run(ctx, nodes[0], []string{b.marker()}, 0, ceilMillis(ttl)).Int64(); err != nil {
		t.Fatal(err)
	}
	// The stale copy arrives.
	b.seed(ctx, stale)
	if m, err := srvs[0].Do("GET", b.marker()); err != nil || !strings.HasPrefix(m.(string), "p:") {
		t.Errorf("node 0's marker is %v (%v) after a copy from its earlier wait, want its new wait", m, err)
	}
	second, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: ttl})
	if err == nil {
		if time.Since(a.Validity().Sent) < ttl-drift(ttl) {
			t.Errorf("a second client was granted the key with token %d while A holds it with token %d", second.Token(), a.Token())
		} else {
			t.Logf("the machine was too slow to tell: A's grant had lapsed when the second client was granted it")
		}
	}
}
