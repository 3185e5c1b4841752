package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/rwlock"
	"github.com/distlock/distlock/testserver"
)

// waitQueued waits until n acquires of key wait for its turn in b.
func waitQueued(t *testing.T, b *etcdlock.Backend, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for etcdlock.Waiting(b, key) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d acquires of %q queued after 30s, want %d", etcdlock.Waiting(b, key), key, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A writer waiting in this process for a writer of the same Backend, with
// no key in etcd yet, keeps out the readers of the Backend that come
// after it: they are not granted before it, and their tries fail.
func TestSharedBehindLocalWriter(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints))
	const key = "jobs/local"
	rw, err := rwlock.New(newLockClient(t, b), key)
	if err != nil {
		t.Fatal(err)
	}
	w1, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *distlock.Lock
		err error
	}
	acquire := func(lock func(context.Context) (*distlock.Lock, error)) <-chan result {
		c := make(chan result, 1)
		go func() {
			l, err := lock(ctx)
			c <- result{l, err}
		}()
		return c
	}
	w2 := acquire(rw.Lock)
	waitQueued(t, b, key, 1)
	if l, err := rw.TryRLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("TryRLock while a writer waits: %v, want ErrNotAcquired", err)
	}
	r := acquire(rw.RLock)
	// The reader has arrived once it queues here (or, were it not to
	// queue, once its key is in etcd, behind the first writer's).
	name := etcdlock.LockName(etcdlock.DefaultPrefix, key)
	deadline := time.Now().Add(30 * time.Second)
	for etcdlock.Waiting(b, key) != 2 && len(keysUnder(t, admin, name)) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the reader neither queued nor created its key within 30s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := w1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var w result
	select {
	case w = <-w2:
	case got := <-r:
		if got.l != nil {
			got.l.Release(ctx)
		}
		t.Fatalf("a reader that came after a waiting writer was granted first: %v", got.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting writer not granted within 30s")
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
	select {
	case got := <-r:
		if got.l != nil {
			got.l.Release(ctx)
		}
		t.Fatalf("a reader granted while a writer holds: %v", got.err)
	default:
	}
	if err := w.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-r:
		if got.err != nil {
			t.Fatal(got.err)
		}
		if got.l.Token() <= w.l.Token() {
			t.Errorf("the reader's token %d is not above the writer's %d", got.l.Token(), w.l.Token())
		}
		if err := got.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reader not granted within 30s of the writer's release")
	}
}

// A reader that waited behind a writer of its Backend has the lock name's
// turn until its key is created; a reader's try meanwhile, with no writer
// holding or waiting, is granted: it does not fail on the turn.
func TestSharedTryBesideReaderTurn(t *testing.T) {
	e := testserver.StartEtcd(t)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints))
	creates := etcdlock.InterceptReaderCreates(b)
	const key = "jobs/turn"
	rw, err := rwlock.New(newLockClient(t, b), key)
	if err != nil {
		t.Fatal(err)
	}
	w1, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *distlock.Lock
		err error
	}
	acquire := func(lock func(context.Context) (*distlock.Lock, error)) <-chan result {
		c := make(chan result, 1)
		go func() {
			l, err := lock(ctx)
			c <- result{l, err}
		}()
		return c
	}
	// A second writer waits for the turn, so the reader queues behind it.
	w2 := acquire(rw.Lock)
	waitQueued(t, b, key, 1)
	r := acquire(rw.RLock)
	waitQueued(t, b, key, 2)

	tried := make(chan error, 1)
	creates.Next(func() {
		// The waiting reader's key is in etcd; the reader has the turn.
		l, err := rw.TryRLock(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		tried <- err
	})
	if err := w1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var w result
	select {
	case w = <-w2:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting writer not granted within 30s")
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
	if err := w.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-r:
		if got.err != nil {
			t.Fatal(got.err)
		}
		if err := got.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reader not granted within 30s of the writers' release")
	}
	select {
	case err := <-tried:
		if err != nil {
			t.Errorf("TryRLock while a reader has the turn and no writer holds or waits: %v", err)
		}
	default:
		t.Fatal("the reader's key was created without the hook running")
	}
}
