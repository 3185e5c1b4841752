package pglock_test

import (
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/pglock"
)

// The URL's parameters for the server reach it as libpq would read them
// once OpenURL has taken its own out: libpq, which pgx follows, decodes
// "%20" to a space and leaves a "+" a plus (a space re-encoded as "+"
// reached the server as a plus). Both the pool's sessions and the LISTEN
// session get them.
func TestOpenURLKeepsServerParameters(t *testing.T) {
	ctx := testCtx(t)
	app := "url_" + strings.ToLower(rand.Text()[:10])
	b, err := pglock.OpenURL(ctx, server.DSN+"&options=-c%20statement_timeout%3D5000&application_name="+app+"+a%20b"+
		"&mode=lease&poll_interval=1h&listen_host="+addrOf(server))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var timeout, name string
	if err := b.Pool().QueryRow(ctx, `SELECT current_setting('statement_timeout'), current_setting('application_name')`).Scan(&timeout, &name); err != nil {
		t.Fatal(err)
	}
	if timeout != "5s" || name != app+"+a b" {
		t.Fatalf("the pool's session has statement_timeout %q and application_name %q; want 5s and %q", timeout, name, app+"+a b")
	}
	admin := newPool(t, server)
	eventually(t, 30*time.Second, "the LISTEN session, with the URL's parameters", func() bool {
		return count(t, admin, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN distlock%'`, app+"+a b") == 1
	})
}

// A parameter that is neither pglock's nor one of libpq's and pgx's that
// it passes on is refused before anything is sent: pgx would send it to
// the server as a setting, which libpq does not do (a setting goes in
// options). The hosts, the user and the database have their places, and
// dial_timeout is libpq's connect_timeout.
func TestOpenURLRefusesUnknownParameters(t *testing.T) {
	ctx := testCtx(t)
	for query, want := range map[string]string{
		"statement_timeout=5000":                `unknown parameter "statement_timeout" (known: `,
		"application_name=a&application_name=b": `parameter "application_name" given 2 times`,
		"sslmode=disable&host=127.0.0.1":        `parameter "host": the hosts go between "//" and the database`,
		"password=pw":                           `parameter "password": the user information goes before the host`,
		"dbname=postgres":                       `parameter "dbname": the database is the path`,
		"dial_timeout=1s":                       `parameter "dial_timeout": libpq's connect_timeout (seconds) bounds connecting`,
	} {
		b, err := pglock.OpenURL(ctx, server.DSN+"&"+query)
		if err == nil {
			b.Close()
			t.Errorf("OpenURL(...&%s) succeeded", query)
			continue
		}
		if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenURL(...&%s): %v, want ErrInvalidOption saying %q", query, err, want)
		}
	}
}
