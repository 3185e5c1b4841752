package redislock_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// The holder of one key (Holder, WatchHolder, SetOwner) and the election
// suite, in each mode, against a real server: a watch is woken by the
// key's release channel.
func TestHolderAndElection(t *testing.T) {
	srv := startRedis(t)
	for _, mode := range suiteModes {
		factory := func(t *testing.T) driver.Backend { return newBackend(t, srv.Addr, mode.opts...) }
		t.Run(mode.name+"/Holder", func(t *testing.T) {
			distlocktest.RunHolder(t, factory, suiteOptions(newClient(t, srv.Addr))...)
		})
		t.Run(mode.name+"/Election", func(t *testing.T) {
			distlocktest.RunElection(t, factory, suiteOptions(newClient(t, srv.Addr))...)
		})
	}
}

// Close waits for the goroutine of a watch that is still live, even with
// a re-mark of its marker under way: before, the goroutine outlived
// Close, using the client after it (which OpenURL's Backend closes).
func TestCloseWaitsForWatch(t *testing.T) {
	srv := startRedis(t)
	remarking := make(chan struct{}, 1)
	var block atomic.Bool
	client := newClient(t, srv.Addr)
	client.AddHook(blockRemarks{block: &block, remarking: remarking})
	b := mustNew(t, client)
	redislock.SetRemarkPeriod(b, 10*time.Millisecond)
	out, err := b.WatchHolder(context.Background(), "k") // a watch that never ends by itself
	if err != nil {
		t.Fatal(err)
	}
	block.Store(true)
	select {
	case <-remarking:
	case <-time.After(time.Minute):
		t.Fatal("no re-mark of the watch marker")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case _, ok := <-out:
			if !ok {
				return
			}
		default:
			t.Fatal("the watch's goroutine outlived Close: its channel is open")
		}
	}
}

// blockRemarks is a go-redis hook that, once block is set, holds every
// run of the watch script (the re-marks) until its context ends, and
// tells remarking when one is held.
type blockRemarks struct {
	block     *atomic.Bool
	remarking chan struct{}
}

func (h blockRemarks) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h blockRemarks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h blockRemarks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		isMark := false
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasSuffix(s, ":watched") {
				isMark = true
			}
		}
		if !isMark || !h.block.Load() {
			return next(ctx, cmd)
		}
		select {
		case h.remarking <- struct{}{}:
		default:
		}
		<-ctx.Done()
		cmd.SetErr(ctx.Err())
		return ctx.Err()
	}
}
