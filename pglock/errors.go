package pglock

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock/driver"
)

// ErrClosed means the Backend was closed. It matches distlock.ErrClosed.
var ErrClosed = driver.ClosedError("pglock")

// staleState is the SQLSTATE distlock_admit raises for a stale token.
const staleState = "DL001"

// sortErr turns an error of a PostgreSQL call into what the distlock
// contract asks for: a plain error for a refusal by the server that a retry
// cannot fix (missing privileges, a missing table, bad input), and
// ErrUnavailable for everything else: the connection failed, or the server
// is out of resources, shutting down, or cancelled the statement. pgx's
// errors name the host, user and database but never the password.
func sortErr(what string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:min(2, len(pgErr.Code))] {
		case "08", "40", "53", "55", "57", "58":
			// connection, rollback (deadlock, serialization), resources,
			// object in use or lock not available, operator intervention,
			// system error
		default:
			return fmt.Errorf("pglock: %s: %w", what, err)
		}
	}
	return fmt.Errorf("%w: pglock: %s: %w", driver.ErrUnavailable, what, err)
}
