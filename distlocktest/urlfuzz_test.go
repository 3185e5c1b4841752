package distlocktest_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/distlock/distlock/distlocktest"
)

// failures stands in for a test and records whether it failed.
type failures struct {
	testing.TB
	failed bool
}

func (f *failures) Helper() {}

func (f *failures) Fatalf(string, ...any) {
	f.failed = true
	runtime.Goexit()
}

// check runs PasswordBlind on parse and reports whether it failed.
func check(parse func(string) error, password string) bool {
	f := &failures{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		distlocktest.PasswordBlind(f, parse, "x://", "u", password, "h")
	}()
	<-done
	return f.failed
}

// PasswordBlind passes a parser whose outcome does not depend on the
// password, and fails one whose error shows it or whose outcome it
// decides.
func TestPasswordBlind(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parse func(string) error
		fails bool
	}{
		{"blind", func(raw string) error {
			if strings.HasPrefix(raw, "x://") {
				return errors.New("x: bad host")
			}
			return nil
		}, false},
		{"error quotes the URL", func(raw string) error { return fmt.Errorf("x: bad URL %q", raw) }, true},
		{"password decides", func(raw string) error {
			if strings.Contains(raw, "pw9") {
				return errors.New("x: bad")
			}
			return nil
		}, true},
	} {
		if got := check(tc.parse, "pw9"); got != tc.fails {
			t.Errorf("%s: failed %v, want %v", tc.name, got, tc.fails)
		}
	}
}
