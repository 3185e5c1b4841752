package pglock_test

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
)

// A database made by the previous version of the schema (version 2, in
// testdata) is migrated by the first use of several Backends at once, in
// both modes, each of which then works; and the previous version's
// acquire, which ignores the queue, still excludes the new one.
func TestMigrateFromV2Concurrently(t *testing.T) {
	ctx := testCtx(t)
	old, err := os.ReadFile("testdata/schema-v2.sql")
	if err != nil {
		t.Fatal(err)
	}
	admin := newPool(t, server)
	db := "mig_" + strings.ToLower(rand.Text()[:10])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	dsn := strings.Replace(server.DSN, "/postgres?", "/"+db+"?", 1)
	pool := newPoolDSN(t, dsn)
	if _, err := pool.Exec(ctx, string(old)); err != nil {
		t.Fatalf("schema version 2: %v", err)
	}
	const n = 6
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := []pglock.Option{pglock.WithMode(pglock.LeaseMode), pglock.WithListen(dsn)}
			if i%2 == 1 {
				opts = nil
			}
			b, err := pglock.New(newPoolDSN(t, dsn), opts...)
			if err != nil {
				t.Error(err)
				return
			}
			defer b.Close()
			l, err := b.Acquire(ctx, "migrate/"+t.Name(), driver.AcquireOptions{TTL: time.Minute, Wait: true})
			if err != nil {
				t.Errorf("backend %d: %v", i, err)
				return
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("backend %d: release: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// The previous version's acquire, which ignores the queue, and the
	// new one exclude each other.
	key := "migrate/old/" + t.Name()
	var token *int64
	if err := pool.QueryRow(ctx, `SELECT granted FROM distlock_lease_acquire($1, 'old', '', 60000)`, key).Scan(&token); err != nil || token == nil {
		t.Fatalf("old acquire: %v (token %v)", err, token)
	}
	b, err := pglock.New(pool, pglock.WithMode(pglock.LeaseMode))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); err == nil {
		t.Fatal("a try was granted a key the previous version's acquire holds")
	}
}

// newPoolDSN is newPool for a DSN of another database.
func newPoolDSN(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
