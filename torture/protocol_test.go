package torture

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/distlock/distlock"
)

// Tokens cross the harness's protocol, and land in a recorded history, as
// decimal strings, as in every JSON of distlock: a JSON number above 2^53
// loses digits in JavaScript and in tools that read numbers as doubles.
func TestTokensInJSONAreDecimalStrings(t *testing.T) {
	const want = `"token":"18446744073709551615"`
	for _, c := range []struct {
		name    string
		v, back any
		token   func(any) uint64
	}{
		{"reply", reply{Token: math.MaxUint64}, &reply{}, func(v any) uint64 { return v.(*reply).Token }},
		{"op", Op{Token: math.MaxUint64}, &Op{}, func(v any) uint64 { return v.(*Op).Token }},
	} {
		data, err := json.Marshal(c.v)
		if err != nil || !strings.Contains(string(data), want) {
			t.Errorf("%s: %s (%v); want %s", c.name, data, err, want)
			continue
		}
		if err := json.Unmarshal(data, c.back); err != nil || c.token(c.back) != math.MaxUint64 {
			t.Errorf("%s: read back %+v (%v)", c.name, c.back, err)
		}
	}
}

// A lock set's release error (the parts' errors joined) is taken apart
// per part, so that each part's release is recorded with its own outcome.
func TestPartErr(t *testing.T) {
	lost := &distlock.KeyError{Key: "a", Op: "release", Err: fmt.Errorf("%w: gone", distlock.ErrLockLost)}
	down := &distlock.KeyError{Key: "c", Op: "release", Err: distlock.ErrUnavailable}
	joined := errors.Join(down, lost)
	for key, want := range map[string]string{"a": kindLost, "b": "", "c": kindUnavailable} {
		if got := errKind(partErr(joined, key)); got != want {
			t.Errorf("part %s: kind %q, want %q", key, got, want)
		}
	}
	if got := errKind(partErr(lost, "a")); got != kindLost {
		t.Errorf("a lone part's error: kind %q", got)
	}
	if partErr(nil, "a") != nil {
		t.Error("no error: a part's error")
	}
}
