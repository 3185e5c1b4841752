package pglock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fence"
)

// admitSQL admits a token for a resource (see distlock_admit in Schema).
const admitSQL = `SELECT @schema@.distlock_admit($1::pg_catalog.text, $2::pg_catalog.int8)`

// admitKey is where a connection's CustomData keeps admitSQL for the
// schema Admit found through it.
const admitKey = "github.com/distlock/distlock/pglock.admit"

// admitStatement returns admitSQL for the schema that holds distlock_admit,
// as seen through tx's connection: found (see locate) on the connection's
// first Admit, and kept with the connection; "" when distlock_admit is
// missing.
func admitStatement(ctx context.Context, tx pgx.Tx) (string, error) {
	data := tx.Conn().PgConn().CustomData()
	if sql, ok := data[admitKey].(string); ok {
		return sql, nil
	}
	f, err := locate(ctx, tx)
	if err != nil {
		return "", err
	}
	if !f.has("distlock_admit", "distlock_resource") {
		return "", nil
	}
	sql := newStatements(f).qualified(admitSQL)
	data[admitKey] = sql
	return sql, nil
}

// Fence guards data kept in PostgreSQL with fencing tokens: Admit checks a
// token in the transaction that writes the data. It counts the tokens it
// refuses (distlock.fence.rejections, distlock.guard "pglock.Fence"; see
// fence.WithMeterProvider). The zero Fence is ready to use and counts on
// the global provider. It is safe for concurrent use.
type Fence struct {
	once     sync.Once
	rejected *fence.Counter // made at the first refusal when NewFence did not
}

// counter returns the Counter of f's refusals.
func (f *Fence) counter() *fence.Counter {
	f.once.Do(func() {
		if f.rejected == nil {
			f.rejected = fence.NewCounter("pglock.Fence")
		}
	})
	return f.rejected
}

// NewFence returns a Fence configured by opts.
func NewFence(opts ...fence.Option) *Fence {
	return &Fence{rejected: fence.NewCounter("pglock.Fence", opts...)}
}

// Admit admits token for resource inside tx, the transaction that writes
// the resource: it succeeds if token is at least the highest token admitted
// for resource so far, and records it. Otherwise it returns a
// *fence.StaleTokenError, which matches fence.ErrStaleToken, and tx is
// aborted: it can only be rolled back, so none of its writes take effect.
//
// The resource's row in distlock_resource stays locked until tx ends, so
// the check and the writes are one atomic step whether Admit comes before
// or after them: a holder that lost its lock while paused cannot commit
// after the next holder has admitted its larger token, and two transactions
// with the same token (one holder writing twice) both commit.
//
// Admit works with any lock's token (a distlock.Lock's Token, from any
// backend), on any database where Migrate has been run. It finds the
// schema that holds distlock_admit through tx's connection, and checks who
// owns it (see Schema and trust in the package documentation), at its
// first use on the connection, which keeps what it found. The same check
// is available without Go as the SQL function
// distlock_admit(resource, token), which raises SQLSTATE DL001 for a stale
// token: call it in the writing transaction from any language, or from a
// trigger (see the package documentation).
func (f *Fence) Admit(ctx context.Context, tx pgx.Tx, resource string, token uint64) error {
	if tx == nil {
		return fmt.Errorf("%w: pglock: fence: nil transaction", driver.ErrInvalidOption)
	}
	if token == 0 {
		f.counter().Rejected(ctx)
		return &fence.StaleTokenError{Resource: resource, Token: 0}
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("%w: pglock: fence: token %d is beyond PostgreSQL's bigint", driver.ErrInvalidOption, token)
	}
	sql, err := admitStatement(ctx, tx)
	if err != nil {
		return err
	}
	if sql == "" {
		return fmt.Errorf("pglock: fence %q: distlock_admit is missing: run pglock.Migrate (or pglock.Schema) on this database", resource)
	}
	var highest int64
	err = tx.QueryRow(ctx, sql, pgx.QueryExecModeExec, resource, int64(token)).Scan(&highest)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == staleState:
		h, _ := strconv.ParseUint(pgErr.Detail, 10, 64)
		f.counter().Rejected(ctx)
		return &fence.StaleTokenError{Resource: resource, Token: token, Highest: h}
	case errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "3F000"): // undefined_function, invalid_schema_name
		delete(tx.Conn().PgConn().CustomData(), admitKey) // the schema moved: find it again
		return fmt.Errorf("pglock: fence %q: distlock_admit is missing: run pglock.Migrate (or pglock.Schema) on this database: %w", resource, err)
	}
	return sortErr(fmt.Sprintf("fence %q", resource), err)
}
