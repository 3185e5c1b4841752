package distlocktest

import (
	"testing"

	"github.com/distlock/distlock/driver"
)

// PasswordBlind reads prefix+user+":"+password+"@"+suffix with parse, and
// again with driver.OtherSecret(password) in place of password, and
// fails t if the two outcomes differ: an error for one and not the other,
// or errors that read differently. Then it reads prefix+suffix, which may
// be any string at all, for a panic.
func PasswordBlind(t testing.TB, parse func(raw string) error, prefix, user, password, suffix string) {
	t.Helper()
	raw := prefix + user + ":" + password + "@" + suffix
	other := driver.OtherSecret(password)
	err := parse(raw)
	err2 := parse(prefix + user + ":" + other + "@" + suffix)
	if (err == nil) != (err2 == nil) {
		t.Fatalf("the password decides whether %q parses: %v / %v", raw, err, err2)
	}
	if err != nil && err.Error() != err2.Error() {
		t.Fatalf("the error shows the password:\n%q: %v\n%q: %v", password, err, other, err2)
	}
	_ = parse(prefix + suffix)
}
