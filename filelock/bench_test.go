//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

// Uncontended acquire and release: open, flock, a durable token (pwrite and
// fdatasync), the holder description, and the release.
func BenchmarkAcquireRelease(b *testing.B) {
	be := newBackend(b, b.TempDir())
	ctx := context.Background()
	for b.Loop() {
		l, err := be.Acquire(ctx, "bench", driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// Refresh, the liveness check the Client runs every TTL/3.
func BenchmarkRefresh(b *testing.B) {
	be := newBackend(b, b.TempDir())
	ctx := context.Background()
	l, err := be.Acquire(ctx, "bench", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release(ctx)
	for b.Loop() {
		if _, err := l.Refresh(ctx, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// Hand-off: a waiter on another Backend (as in another process) is woken by
// the release. Reports the time from Release to the waiter's grant.
func BenchmarkHandoff(b *testing.B) {
	dir := b.TempDir()
	holder, waiter := newBackend(b, dir), newBackend(b, dir)
	ctx := context.Background()
	opts := driver.AcquireOptions{TTL: time.Minute, Wait: true}
	var total time.Duration
	for b.Loop() {
		l, err := holder.Acquire(ctx, "bench", opts)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			w, err := waiter.Acquire(ctx, "bench", opts)
			at := time.Now()
			if err != nil {
				b.Error(err)
			} else {
				w.Release(ctx)
			}
			got <- at
		}()
		b.StopTimer()
		time.Sleep(2 * time.Millisecond) // let the waiter block (not measured)
		b.StartTimer()
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		total += (<-got).Sub(released)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/handoff")
}
