package pglock

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock/driver"
)

// ErrClosed means the Backend was closed. It matches distlock.ErrClosed.
var ErrClosed = driver.ClosedError("pglock")

// staleState is the SQLSTATE distlock_admit raises for a stale token.
const staleState = "DL001"

// sorter sorts PostgreSQL errors (see driver.Sorter). pgx's errors name
// the host, user and database but never the password.
var sorter = driver.Sorter{Pkg: "pglock", Permanent: permanent}

// sortErr turns an error of a PostgreSQL call, which what names, into what
// the distlock contract asks for.
func sortErr(what string, err error) error {
	return sorter.Sort(nil, nil, what, err)
}

// permanent reports whether the server refused a request in a way that a
// retry cannot fix (missing privileges, a missing table, bad input): every
// SQLSTATE but those of the classes of connection failures (08), rollbacks
// (40: deadlock, serialization), resources (53), an object in use or a lock
// not available (55), operator intervention (57) and system errors (58).
// Errors without a SQLSTATE (the connection failed) are not permanent.
func permanent(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code[:min(2, len(pgErr.Code))] {
	case "08", "40", "53", "55", "57", "58":
		return false
	}
	return true
}
