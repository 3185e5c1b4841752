//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package backends_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backends"
	_ "github.com/distlock/distlock/filelock" // registers file://
)

// A program whose lock service is configured by URL: here a lock
// directory, as DISTLOCK_BACKEND=redis://... or etcd://... would name a
// lock service.
func Example() {
	dir, err := os.MkdirTemp("", "locks")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	b, err := backends.Open(ctx, "file://"+dir)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	client, err := distlock.New(b)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	lock, err := client.Acquire(ctx, "reports/nightly")
	if err != nil {
		log.Fatal(err)
	}
	// The token increases with every grant of the key; pass it to the
	// storage the lock protects, which refuses older ones.
	fmt.Println("fencing token > 0:", lock.Token() > 0)
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: fencing token > 0: true
}

// URLs in messages and logs go through Redact.
func ExampleRedact() {
	fmt.Println(backends.Redact("redis://app:s3cret@db1:6379/0?prefix=app:"))
	fmt.Println(backends.Redact("postgres://db1/app?sslmode=require&password=s3cret"))
	fmt.Println(backends.Redact("redis:app:s3cret@db1:6379/0")) // no "//": the scheme only
	// Output:
	// redis://xxxxx@db1:6379/0?prefix=app:
	// postgres://db1/app?sslmode=require&password=xxxxx
	// redis:(redacted)
}
