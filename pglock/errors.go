package pglock

import (
	"errors"
	"fmt"
	"strings"

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
// the distlock contract asks for. A failure to connect says its cause (see
// connectCause).
func sortErr(what string, err error) error {
	return sorter.Sort(nil, nil, what, connectCause(err))
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

// refusedTLS ends pgx's error of an attempt to connect with TLS to a
// server that does not offer it.
const refusedTLS = ": tls error: server refused TLS connection"

// connectCause returns err, pgx's error of a failed connection, without
// the attempts with TLS that the server refused and that an attempt
// without TLS to the same address followed: with sslmode=prefer, the
// default, that refusal is the expected first step, and pgx listed it
// first, and the cause (a database that does not exist, a wrong password)
// after it, on a line of its own. An attempt that failed as the one
// before it did (both dials refused) is left out too. errors.Is and
// errors.As still see err's chain; errors.Unwrap does not reach what is
// left out.
func connectCause(err error) error {
	var ce *pgconn.ConnectError
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	joined, ok := errors.Unwrap(ce).(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	tries := joined.Unwrap()
	var kept []string
	for i, e := range tries {
		msg := e.Error()
		refused, _, isTLS := strings.Cut(msg, refusedTLS)
		if isTLS && i+1 < len(tries) && strings.HasPrefix(tries[i+1].Error(), refused+": ") ||
			len(kept) > 0 && kept[len(kept)-1] == msg {
			continue
		}
		kept = append(kept, msg)
	}
	if len(kept) == len(tries) {
		return err
	}
	// As pgconn.ConnectError writes it.
	said := fmt.Sprintf("failed to connect to `user=%s database=%s`: %s", ce.Config.User, ce.Config.Database, kept[0])
	if len(kept) > 1 {
		said = fmt.Sprintf("failed to connect to `user=%s database=%s`:\n\t%s", ce.Config.User, ce.Config.Database,
			strings.ReplaceAll(strings.Join(kept, "\n"), "\n", "\n\t"))
	}
	return &reworded{err: err, msg: strings.Replace(err.Error(), ce.Error(), said, 1)}
}

// reworded is err with a message of its own. It has no Unwrap: err's
// message is what it replaces.
type reworded struct {
	err error
	msg string
}

func (e *reworded) Error() string        { return e.msg }
func (e *reworded) Is(target error) bool { return errors.Is(e.err, target) }
func (e *reworded) As(target any) bool   { return errors.As(e.err, target) }
