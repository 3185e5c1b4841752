//go:build linux

package cli_test

import (
	"encoding/json"
	"slices"
	"syscall"
	"testing"
)

// The Python client's permits, through `distlock serve` on the default
// file:// service: both permits of a limit of 2 held with their own slots,
// a third refused until one is released, another limit refused, and the
// permit of a session that died given back to a waiter.
func TestPythonClientPermits(t *testing.T) {
	e := newEnv(t)
	s := e.serve()
	defer func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		e.wait(s.started)
	}()
	out, err := python(t, "permits", s.url, e.tmp).Output()
	if err != nil {
		t.Fatalf("python3 e2e.py permits: %v\n%s", err, stderrOf(err))
	}
	var got struct {
		Slots      []int  `json:"slots"`
		Increasing bool   `json:"increasing"`
		Lock       string `json:"lock"`
		Third      string `json:"third"`
		OtherLimit string `json:"other_limit"`
		State      struct {
			Limit   int      `json:"limit"`
			Waiting int      `json:"waiting"`
			Tokens  []string `json:"tokens"`
			Slots   []*int   `json:"slots"`
		} `json:"state"`
		AfterRelease struct {
			Slot       int  `json:"slot"`
			Increasing bool `json:"increasing"`
		} `json:"after_release"`
		DeadCameBack bool `json:"dead_came_back"`
		Empty        bool `json:"empty"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("python: %s", out)
	if !slices.Equal(got.Slots, []int{0, 1}) || !got.Increasing || got.Lock != "semaphore/e2e/exports" ||
		got.Third != "not-acquired" || got.OtherLimit != "limit-mismatch" ||
		got.State.Limit != 2 || len(got.State.Tokens) != 2 || len(got.State.Slots) != 2 || got.State.Slots[0] == nil ||
		!got.AfterRelease.Increasing || !got.DeadCameBack || !got.Empty {
		t.Errorf("python: %s; want slots 0 and 1 with increasing tokens as semaphore/e2e/exports, a third not acquired, "+
			"limit 3 a limit-mismatch, the state of both, the next permit after a release above, a dead session's permit back, none left", out)
	}
}
