package etcdlock_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
)

// OpenURL's client tries a server it cannot reach again at least once a
// second or so, while a request waits: 8 tries take about 4 s. With
// gRPC's default pauses (from 1 s, growing 1.6x a try to two minutes)
// they take 34 s at the least, and the first request after an outage of
// 30 s waited 13 s more.
func TestOpenURLTriesAgainWithinASecond(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tries.Add(1)
			c.Close() // a server that is not there yet
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	ctx := testCtx(t)
	b, err := etcdlock.OpenURL(ctx, "etcd://"+ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	// A request that waits for the server keeps the client trying.
	actx, cancel := context.WithCancel(ctx)
	acquired := make(chan error, 1)
	go func() {
		_, err := b.Acquire(actx, "k", driver.AcquireOptions{TTL: 10 * time.Second, Wait: true})
		acquired <- err
	}()
	defer func() { cancel(); <-acquired }()
	from := tries.Load()
	deadline := time.Now().Add(30 * time.Second)
	for tries.Load() < from+8 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tries of the server in 30s, want 8", tries.Load()-from)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
