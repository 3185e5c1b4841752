package pglock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

// The clean-up of a try frees its grant on sessions with
// standard_conforming_strings off (a setting the server still allows, per
// role, database or connection), as every other statement of lease mode
// works there: it does not depend on how the driver would have to quote
// the key into the query's text.
func TestLeaseAbandonNonStandardStrings(t *testing.T) {
	ctx := testCtx(t)
	admin := newPool(t, server)
	b := newLeaseBackend(t, server.DSN+"&options=-c%20standard_conforming_strings%3Doff")
	key := `lease/abandon-strings/'\'; ` + t.Name()
	l := acquire(t, b, ctx, key, driver.AcquireOptions{TTL: time.Hour})
	grant, _ := leaseRow(t, admin, key)
	if err := b.Abandon(ctx, key, *grant, time.Minute); err != nil {
		t.Fatalf("Abandon: %v", err)
	}
	var free bool
	if err := admin.QueryRow(ctx, `SELECT grant_id IS NULL AND expires <= now() FROM distlock_lease WHERE key = $1`, key).Scan(&free); err != nil {
		t.Fatal(err)
	}
	if !free {
		t.Errorf("Abandon left the grant holding the key")
	}
	_ = l.Release(ctx) // its turn in the Backend; the grant is gone
}
