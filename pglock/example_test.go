package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/pglock"
)

// The examples run against the server TestMain starts, named by
// DATABASE_URL.

// A lock on PostgreSQL, and a write in the same database that the database
// refuses if a newer holder has written meanwhile.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	backend, err := pglock.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	defer backend.Close() // before pool.Close
	locks, err := distlock.New(backend)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close(ctx)

	lock, err := locks.Acquire(ctx, "reports/nightly")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	// One context for the whole transaction, lock.Context(): once the lock
	// is lost, pgx cancels whichever statement is running and the
	// transaction rolls back, so work that no longer holds the lock stops
	// at once. The fence is what refuses a holder that was paused past its
	// loss (its context looked live when it checked); the context saves
	// the work of one that is told in time.
	lctx := lock.Context()
	reports := pglock.NewFence()
	err = pgx.BeginFunc(lctx, pool, func(tx pgx.Tx) error {
		if err := reports.Admit(lctx, tx, "reports/nightly", lock.Token()); err != nil {
			return err // fence.ErrStaleToken: a newer holder has written
		}
		_, err := tx.Exec(lctx, `CREATE TABLE IF NOT EXISTS reports (name text PRIMARY KEY, done_at timestamptz)`)
		if err == nil {
			_, err = tx.Exec(lctx, `INSERT INTO reports VALUES ('nightly', now()) ON CONFLICT (name) DO UPDATE SET done_at = now()`)
		}
		return err
	})
	fmt.Println("written:", err == nil)
	// Output: written: true
}

// A holder that lost its lock while paused writes with its old token after
// the next holder has written: the database refuses it, and its transaction
// commits nothing.
func ExampleFence() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pglock.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	f := pglock.NewFence()
	write := func(token uint64) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// Admit first: the writes after it cannot deadlock with another
			// fenced writer's.
			if err := f.Admit(ctx, tx, "example/fence", token); err != nil {
				return err
			}
			// ... the transaction's own writes ...
			return nil
		})
	}
	base := uint64(time.Now().UnixNano()) // larger than any earlier run's
	fmt.Println(write(base + 34))         // the new holder
	fmt.Println(write(base + 34))         // again: same token, admitted
	err = write(base + 33)                // the old holder wakes up
	fmt.Println(errors.Is(err, fence.ErrStaleToken))
	// Output:
	// <nil>
	// <nil>
	// true
}

// SELECT ... FOR UPDATE: the row is the lock. Two transfers into one
// account at once do not lose an update, with no lock service involved;
// the row lock ends with the transaction, so it cannot outlive a crashed
// client.
func Example_selectForUpdate() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	mustExec(ctx, pool, `CREATE TABLE IF NOT EXISTS accounts (id int PRIMARY KEY, balance int NOT NULL, version int NOT NULL DEFAULT 0)`)
	mustExec(ctx, pool, `INSERT INTO accounts VALUES (1, 100) ON CONFLICT (id) DO UPDATE SET balance = 100, version = 0`)

	deposit := func(amount int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var balance int
			if err := tx.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 1 FOR UPDATE`).Scan(&balance); err != nil {
				return err
			}
			// Without FOR UPDATE, both transfers could read 100 here.
			_, err := tx.Exec(ctx, `UPDATE accounts SET balance = $1 WHERE id = 1`, balance+amount)
			return err
		})
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := deposit(10); err != nil {
				log.Fatal(err)
			}
		})
	}
	wg.Wait()
	var balance int
	if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 1`).Scan(&balance); err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", balance)
	// Output: balance: 120
}

// An optimistic version column: read without locking, write only if the
// version is still the one read. Zero rows updated is a conflict, and the
// writer reads again and retries.
func Example_optimisticVersion() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	mustExec(ctx, pool, `CREATE TABLE IF NOT EXISTS accounts (id int PRIMARY KEY, balance int NOT NULL, version int NOT NULL DEFAULT 0)`)
	mustExec(ctx, pool, `INSERT INTO accounts VALUES (2, 100) ON CONFLICT (id) DO UPDATE SET balance = 100, version = 0`)

	var balance, version int
	read := func() {
		if err := pool.QueryRow(ctx, `SELECT balance, version FROM accounts WHERE id = 2`).Scan(&balance, &version); err != nil {
			log.Fatal(err)
		}
	}
	write := func(newBalance int) bool {
		tag, err := pool.Exec(ctx, `UPDATE accounts SET balance = $1, version = version + 1 WHERE id = 2 AND version = $2`, newBalance, version)
		if err != nil {
			log.Fatal(err)
		}
		return tag.RowsAffected() == 1
	}

	read()
	// Another writer gets in between.
	mustExec(ctx, pool, `UPDATE accounts SET balance = balance + 50, version = version + 1 WHERE id = 2`)
	for !write(balance + 10) {
		fmt.Println("conflict: read again")
		read()
	}
	read()
	fmt.Println("balance:", balance, "version:", version)
	// Output:
	// conflict: read again
	// balance: 160 version: 2
}

// A conditional update: the check and the change are one statement, so two
// buyers of the last item cannot both get it. No lock is needed.
func Example_conditionalUpdate() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	mustExec(ctx, pool, `CREATE TABLE IF NOT EXISTS inventory (product_id int PRIMARY KEY, quantity int NOT NULL CHECK (quantity >= 0))`)
	mustExec(ctx, pool, `INSERT INTO inventory VALUES (7, 1) ON CONFLICT (product_id) DO UPDATE SET quantity = 1`)

	buy := func() bool {
		tag, err := pool.Exec(ctx, `UPDATE inventory SET quantity = quantity - 1 WHERE product_id = $1 AND quantity > 0`, 7)
		if err != nil {
			log.Fatal(err)
		}
		return tag.RowsAffected() == 1 // 0 rows: sold out
	}
	var sold sync.Map
	var wg sync.WaitGroup
	for buyer := range 3 {
		wg.Go(func() { sold.Store(buyer, buy()) })
	}
	wg.Wait()
	n := 0
	sold.Range(func(_, ok any) bool {
		if ok.(bool) {
			n++
		}
		return true
	})
	fmt.Println("buyers served:", n)
	// Output: buyers served: 1
}

// An idempotency key claimed in the same transaction as the effect. The
// guide's process_payment checks whether the key exists and then sets it
// in a second step (two workers can both pass the check and both charge),
// and marks the payment processed before charging (a crash in between
// loses the charge, and a retry skips it). Here the claim is an INSERT ...
// ON CONFLICT DO NOTHING: of two transactions with the same key, the second
// waits for the first and then inserts nothing; and the claim commits with
// the charge or not at all.
func Example_idempotencyKey() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	mustExec(ctx, pool, `CREATE TABLE IF NOT EXISTS payments_processed (idempotency_key text PRIMARY KEY)`)
	mustExec(ctx, pool, `CREATE TABLE IF NOT EXISTS charges (idempotency_key text NOT NULL, amount int NOT NULL)`)
	key := fmt.Sprintf("pay-%d", time.Now().UnixNano())

	processPayment := func(key string, amount int) (charged bool, err error) {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `INSERT INTO payments_processed VALUES ($1) ON CONFLICT DO NOTHING`, key)
			if err != nil || tag.RowsAffected() == 0 {
				return err // already processed (or being processed, and then it waited)
			}
			// The effect, in the same transaction: if it fails, the claim
			// is rolled back with it and a retry charges.
			if _, err := tx.Exec(ctx, `INSERT INTO charges VALUES ($1, $2)`, key, amount); err != nil {
				return err
			}
			charged = true
			return nil
		})
		return charged, err
	}
	var wg sync.WaitGroup
	for range 3 { // a retried request, delivered three times at once
		wg.Go(func() {
			if _, err := processPayment(key, 42); err != nil {
				log.Fatal(err)
			}
		})
	}
	wg.Wait()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM charges WHERE idempotency_key = $1`, key).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("charges:", n)
	// Output: charges: 1
}

// Why the guide's process_payment is wrong: it asks whether the key was
// processed and sets it in a later step. Two deliveries of one request
// that both ask before either sets both charge. (It also sets the key
// before charging, so a crash between the two loses the charge for good.)
// The steps are interleaved by hand here, as two workers can run them.
func Example_idempotencyKeyCheckThenSet() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	mustExec(ctx, pool, `CREATE TABLE IF NOT EXISTS payments_processed (idempotency_key text PRIMARY KEY)`)
	mustExec(ctx, pool, `CREATE TABLE IF NOT EXISTS charges (idempotency_key text NOT NULL, amount int NOT NULL)`)
	key := fmt.Sprintf("pay-%d", time.Now().UnixNano())

	exists := func() bool { // step 1: "if redis.exists(key): return"
		var found bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM payments_processed WHERE idempotency_key = $1)`, key).Scan(&found); err != nil {
			log.Fatal(err)
		}
		return found
	}
	markAndCharge := func() { // step 2: mark, then charge
		mustExec(ctx, pool, fmt.Sprintf(`INSERT INTO payments_processed VALUES ('%s') ON CONFLICT DO NOTHING`, key))
		mustExec(ctx, pool, fmt.Sprintf(`INSERT INTO charges VALUES ('%s', 42)`, key))
	}
	first, second := exists(), exists() // both workers check ...
	if !first {
		markAndCharge() // ... then both act
	}
	if !second {
		markAndCharge()
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM charges WHERE idempotency_key = $1`, key).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("charges:", n)
	// Output: charges: 2
}

func mustExec(ctx context.Context, pool *pgxpool.Pool, sql string) {
	if _, err := pool.Exec(ctx, sql); err != nil {
		log.Fatal(err)
	}
}
