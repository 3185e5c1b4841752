package pglock_test

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// With sslmode=prefer (libpq's default) and a server without TLS, the
// error of a failed connection is its cause, found on the connection
// without TLS (a database that does not exist, a wrong password), on one
// line: not the server's refusal of TLS, the expected first step, first;
// and a cause that both attempts met is said once.
func TestConnectErrorShowsCause(t *testing.T) {
	ctx := testCtx(t)
	// A server of its own, whose user "pw" must give a password.
	srv := testserver.StartPostgres(t)
	admin := newPool(t, srv)
	if _, err := admin.Exec(ctx, "CREATE ROLE pw LOGIN PASSWORD 'right'"); err != nil {
		t.Fatal(err)
	}
	hba := filepath.Join(srv.Dir, "data", "pg_hba.conf")
	conf, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hba, append([]byte("host all pw 127.0.0.1/32 scram-sha-256\n"), conf...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	missing := "nosuch_" + strings.ToLower(rand.Text()[:8])
	prefer := strings.Replace(srv.DSN, "sslmode=disable", "sslmode=prefer", 1)
	for _, tc := range []struct{ url, cause string }{
		{strings.Replace(prefer, "/postgres?", "/"+missing+"?", 1), `database "` + missing + `" does not exist`},
		{strings.Replace(srv.DSN, "/postgres?sslmode=disable", "/"+missing, 1), `database "` + missing + `" does not exist`}, // prefer by default
		{strings.Replace(prefer, "://postgres@", "://pw:wrong@", 1), `password authentication failed for user "pw"`},
		// Both attempts fail alike: said once.
		{"postgres://postgres@" + closedAddr(t) + "/postgres?sslmode=prefer", "connection refused"},
	} {
		b, err := pglock.OpenURL(ctx, tc.url)
		if err == nil {
			b.Close()
			t.Fatalf("OpenURL(%s) connected", tc.url)
		}
		msg := err.Error()
		if !errors.Is(err, distlock.ErrUnavailable) || !strings.Contains(msg, tc.cause) || strings.Contains(msg, "TLS") || strings.Contains(msg, "\n") {
			t.Errorf("OpenURL(%s): %q; want ErrUnavailable with %q, on one line, and no word of TLS", tc.url, msg, tc.cause)
		}
	}
}
