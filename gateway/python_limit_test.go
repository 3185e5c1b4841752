package gateway_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
)

// The Python client raises SessionLimit, with the limit, for a lock, a
// shared lock, a term or a permit past the gateway's limit of locks per
// session, and a session that released one is granted the next.
func TestPythonClientSessionLimit(t *testing.T) {
	const most = 3
	mb := memlock.New()
	t.Cleanup(func() { mb.Close() })
	g := start(t, mb, gateway.WithMaxLocks(most))
	out := runE2E(t, g, "limit", strconv.Itoa(most))
	type raised struct {
		Raised string `json:"raised"`
		Kind   string `json:"kind"`
		Status int    `json:"status"`
		Limit  int    `json:"limit"`
	}
	var got struct {
		Lock, Shared, Term, Permit raised
		AfterRelease               bool `json:"after_release"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := raised{"SessionLimit", "session-limit", 429, most}
	for name, r := range map[string]raised{"lock": got.Lock, "shared": got.Shared, "term": got.Term, "permit": got.Permit} {
		if r != want {
			t.Errorf("%s past the limit: %+v, want %+v", name, r, want)
		}
	}
	if !got.AfterRelease {
		t.Errorf("no lock after a release: %s", out)
	}
	g.idle()
}
