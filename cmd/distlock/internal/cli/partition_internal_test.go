package cli

import (
	"errors"
	"strings"
	"testing"
)

// partitionPool sizes the pool of a postgres:// URL in session mode for
// the units, refuses one sized too small, and leaves every other URL as
// it is.
func TestPartitionPool(t *testing.T) {
	for _, tc := range []struct {
		url, want string
	}{
		{"postgres://u@h/db", "postgres://u@h/db?pool_max_conns=18"},
		{"postgresql://u@h/db?sslmode=disable", "postgresql://u@h/db?sslmode=disable&pool_max_conns=18"},
		{"postgres://u:p?w@h/db", "postgres://u:p?w@h/db?pool_max_conns=18"}, // a "?" in the password
		{"postgres://u@h/db?pool_max_conns=18", "postgres://u@h/db?pool_max_conns=18"},
		{"postgres://u@h/db?pool_max_conns=100", "postgres://u@h/db?pool_max_conns=100"},
		{"postgres://u@h/db?mode=session", "postgres://u@h/db?mode=session&pool_max_conns=18"},
		{"postgres://u@h/db?mode=lease", "postgres://u@h/db?mode=lease"},
		{"postgres://u@h/db?pool_max_conns=many", "postgres://u@h/db?pool_max_conns=many"}, // opening it says so
		{"postgres://u@h/db?pool_max_conns=4&pool_max_conns=40", "postgres://u@h/db?pool_max_conns=4&pool_max_conns=40"},
		{"postgres:///db", "postgres:///db"}, // no host: opening it says so
		{"redis://h:6379", "redis://h:6379"},
		{"file://", "file://"},
		{"", ""},
	} {
		got, err := partitionPool(tc.url, 16)
		if err != nil || got != tc.want {
			t.Errorf("partitionPool(%q, 16) = %q, %v; want %q", tc.url, got, err, tc.want)
		}
	}
	// The second has the parameter's name in its password.
	for _, u := range []string{"postgres://u:secret@h/db?pool_max_conns=4", "postgres://u:secret,pool_max_conns=@h/db?pool_max_conns=4"} {
		_, err := partitionPool(u, 16)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "at least 18") || strings.Contains(err.Error(), "secret") {
			t.Errorf("pool_max_conns=4 for 16 units: %v; want a usage error asking for at least 18, without the password", err)
		}
	}
}
