package standby

import (
	"slices"
	"testing"
)

func TestAsksForRun(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"run", "k", "--", "true"}, true},
		{[]string{"-v", "run", "k", "--", "true"}, true},
		{[]string{"--backend", "redis://h", "run", "k", "--", "true"}, true},
		{[]string{"--backend=redis://h", "--verbose", "run"}, true},
		{[]string{"status"}, false},
		{[]string{"serve", "run"}, false},
		{[]string{"--backend", "run", "status"}, false}, // "run" is the flag's value
		{[]string{"--", "run"}, false},
		{[]string{"__supervise", "1"}, false},
		{nil, false},
	} {
		if got := asksForRun(c.args); got != c.want {
			t.Errorf("asksForRun(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestRuntimeEnv(t *testing.T) {
	got := RuntimeEnv([]string{"GOGC=50", "DISTLOCK_BACKEND=redis://u:pw@h", "PATH=/bin", "GORACE=halt_on_error=1", "GOGCX=1"})
	if want := []string{"GOGC=50", "GORACE=halt_on_error=1"}; !slices.Equal(got, want) {
		t.Errorf("RuntimeEnv = %q, want %q", got, want)
	}
}
