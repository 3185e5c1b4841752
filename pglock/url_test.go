package pglock_test

import (
	"crypto/rand"
	"strings"
	"testing"
	"time"

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
		return count(t, admin, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query = 'LISTEN distlock_lease'`, app+"+a b") == 1
	})
}
