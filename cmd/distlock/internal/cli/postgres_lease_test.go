//go:build linux

package cli_test

import (
	"fmt"
	"testing"

	"github.com/distlock/distlock/testserver"
)

// On PostgreSQL through PgBouncer in transaction mode (postgres://...
// ?mode=lease, the lease table, with LISTEN on a direct session): runs get
// increasing tokens, and status lists a holder.
func TestPostgresLeaseRun(t *testing.T) {
	pg := testserver.StartPostgres(t)
	bouncer := testserver.StartPgBouncer(t, pg)
	runAndStatus(t, newEnv(t), fmt.Sprintf("%s&mode=lease&listen_host=127.0.0.1:%d", bouncer.DSN, pg.Port))
}
