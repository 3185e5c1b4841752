package etcdlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/etcdlock"
)

// The etcd lock name of a key, as `etcdctl lock` takes it. Making the
// client and the Backend contacts no server.
func ExampleBackend_KeyPath() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	for _, prefix := range []string{etcdlock.DefaultPrefix, "app/"} {
		backend, err := etcdlock.New(cli, etcdlock.WithPrefix(prefix))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(backend.KeyPath("reports/nightly"), backend.KeyPath("100%"))
		backend.Close()
	}
	// Output:
	// distlock/reports%2Fnightly distlock/100%25
	// app/reports%2Fnightly app/100%25
}

// A lock on etcd, and a write that etcd refuses if the lock has been lost
// by the time it is applied.
func ExampleFence_Txn() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	backend, err := etcdlock.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer backend.Close()
	locks, err := distlock.New(backend, distlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close(ctx)

	lock, err := locks.Acquire(ctx, "accounts/42")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)
	// Work under lock.Context(); write through the fence.
	accounts := etcdlock.NewFence(backend)
	if _, err := accounts.Txn(lock.Context(), lock, clientv3.OpPut("accounts/42/balance", "100")); err != nil {
		log.Fatal(err) // errors.Is(err, distlock.ErrLockLost) if the lock was lost
	}
}

// Opening a Backend from a URL, as the distlock CLI does.
func ExampleOpenURL() {
	ctx := context.Background()
	backend, err := etcdlock.OpenURL(ctx, "etcd://user:password@etcd1:2379,etcd2:2379/myapp/locks?dial_timeout=3s")
	if err != nil {
		log.Fatal(err) // never shows the password
	}
	defer backend.Close() // also closes the client it opened
}
