package torture

import (
	"os"
	"strings"
	"testing"
)

// TestReportMerge: a run of some rows replaces their rows and findings'
// lines in REPORT.md and keeps the others; the code's text (Not run,
// titles) is written anew; rows of a scenario the code no longer runs on a
// backend are dropped; the runs of the kept rows stay listed.
func TestReportMerge(t *testing.T) {
	res := func(backend, name, variant string, mode Mode, rounds int, note string) *Result {
		return &Result{Backend: backend, Scenario: name, Variant: variant, Mode: mode, Expect: ExpectBite,
			Rounds: rounds, Effective: rounds, Notes: []string{"round 0: " + note}}
	}
	old := markdown([]*Result{
		res(backendRedis, "pause", "", Unfenced, 5, "old redis pause"),
		res(backendRedis, "pause", "", Fenced, 5, "old redis pause fenced"),
		res(backendEtcd, "shared", "writer-pause", Unfenced, 5, "old etcd writer-pause"),
		res(backendEtcd, "shared", "writer-pause", Fenced, 5, "old etcd writer-pause fenced"),
		res(backendFile, "shared", "writer-pause", Unfenced, 5, "a row the code no longer runs"),
	}, "env one")
	// Rows of a backend and scenario the code does not run are dropped.
	if !strings.Contains(old, "a row the code no longer runs") {
		t.Fatalf("the fixture's file row is not in the old report:\n%s", old)
	}
	run := markdown([]*Result{
		res(backendEtcd, "shared", "writer-pause", Unfenced, 7, "new etcd writer-pause"),
		res(backendEtcd, "shared", "writer-pause", Fenced, 7, "new etcd writer-pause fenced"),
	}, "env two")
	got := mergeReport(run, old)

	for _, want := range []string{
		"| redis | pause | unfenced | bite | 5 (5) |", "| redis | pause | fenced | bite | 5 (5) |",
		"| etcd | shared/writer-pause | unfenced | bite | 7 (7) |", "| etcd | shared/writer-pause | fenced | bite | 7 (7) |",
		"Example: old redis pause.", "Example: new etcd writer-pause.", "Example: new etcd writer-pause fenced.",
		"\n## Runs\n\n- env one. Rows: pause, shared/writer-pause, on redis, etcd, file.\n- env two. Rows: shared/writer-pause, on etcd.\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the merged report lacks %q", want)
		}
	}
	for _, gone := range []string{"| etcd | shared/writer-pause | unfenced | bite | 5 (5) |", "old etcd writer-pause", "a row the code no longer runs", "| file | shared/writer-pause | unfenced"} {
		if strings.Contains(got, gone) {
			t.Errorf("the merged report keeps %q", gone)
		}
	}
	// The rows keep the code's order: redis's table before etcd's, and in
	// the findings' section the lines under their scenario.
	if i, j := strings.Index(got, "\n## redis\n"), strings.Index(got, "\n## etcd\n"); i < 0 || j < i {
		t.Errorf("backend sections out of order (redis at %d, etcd at %d)", i, j)
	}
	sec := section(got, "### shared/writer-pause")
	if !strings.Contains(sec, "- etcd, unfenced: ") || strings.Contains(sec, "- redis, ") {
		t.Errorf("the findings of shared/writer-pause are wrong:\n%s", sec)
	}
	// The code's text is the fresh one, whatever the old report said.
	if a, b := section(got, "## Not run"), section(markdown(nil, "x"), "## Not run"); a != b {
		t.Errorf("the merged report's Not run section is not the code's:\n%s\nwant\n%s", a, b)
	}
	// Merging a run of nothing changes nothing; merging twice is merging once.
	if again := mergeReport(markdown(nil, "env three"), got); again != got {
		t.Errorf("merging an empty run changed the report:\n%s\nwant\n%s", again, got)
	}
	// A run of every row the old report had leaves no old run listed.
	all := markdown([]*Result{
		res(backendRedis, "pause", "", Unfenced, 9, "n"), res(backendRedis, "pause", "", Fenced, 9, "n"),
		res(backendEtcd, "shared", "writer-pause", Unfenced, 9, "n"), res(backendEtcd, "shared", "writer-pause", Fenced, 9, "n"),
	}, "env four")
	if m := mergeReport(all, got); m != all {
		t.Errorf("a run of every row was merged with the old report:\n%s", section(m, "## Runs"))
	}
}

// TestReportMergeOldPreamble: a report written before the Runs section
// had the run's environment in its preamble; it is read as a run.
func TestReportMergeOldPreamble(t *testing.T) {
	old := "# Torture report\n\nFault-injection runs of distlock against real servers: ...\n\n    " + Command + "\n\nEnvironment: 2026-12-01; linux.\n\nThe election rows were run on 2026-12-04.\n\n" + histories + "\n\n## redis\n\n" + tableHeader +
		"| redis | pause | unfenced | bite | 5 (5) | 3 | Ok/Ok/Illegal | 20 | 15 | 0 | 5/0/5 | 10 | 0 | 0 | - | bites |\n\n## Scenarios and findings\n\n### pause\n\nTitle.\n\n- redis, unfenced: bites.\n"
	got := mergeReport(markdown(nil, "env"), old)
	for _, want := range []string{"\n## Runs\n\n- 2026-12-01; linux.\n- The election rows were run on 2026-12-04.\n", "| redis | pause | unfenced | bite | 5 (5) |", "\n- redis, unfenced: bites.\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the merged report lacks %q", want)
		}
	}
	if strings.Contains(got, "Environment: ") {
		t.Errorf("the merged report keeps the old preamble's Environment line")
	}
}

// section returns the part of md from the line head to the next heading
// of its level or above.
func section(md, head string) string {
	i := strings.Index(md, "\n"+head+"\n")
	if i < 0 {
		return ""
	}
	rest := md[i+1+len(head)+1:]
	level := strings.Repeat("#", strings.Count(strings.Fields(head)[0], "#"))
	for j := 0; j < len(rest); {
		k := strings.IndexByte(rest[j:], '\n')
		if k < 0 {
			break
		}
		line := rest[j : j+k]
		if strings.HasPrefix(line, "#") && len(line) > len(level) && strings.HasPrefix(line, level) && line[len(level)] == ' ' ||
			strings.HasPrefix(line, "# ") || (len(level) == 3 && strings.HasPrefix(line, "## ")) {
			return rest[:j]
		}
		j += k + 1
	}
	return rest
}

// TestReportMergePage: index.html keeps the rows and timelines of the runs
// a run of some rows does not replace, and takes its own.
func TestReportMergePage(t *testing.T) {
	res := func(backend, name, variant string, mode Mode, rounds int, note string) *Result {
		return &Result{Backend: backend, Scenario: name, Variant: variant, Mode: mode, Expect: ExpectBite,
			Rounds: rounds, Effective: rounds, Notes: []string{note}}
	}
	dir := t.TempDir()
	old := page([]*Result{
		res(backendRedis, "pause", "", Unfenced, 5, "old redis pause"),
		res(backendEtcd, "shared", "writer-pause", Unfenced, 5, "old etcd writer-pause"),
		res(backendFile, "shared", "writer-pause", Unfenced, 5, "a row the code no longer runs"),
	}, "env one", dir)
	got := mergePage(page([]*Result{res(backendEtcd, "shared", "writer-pause", Unfenced, 7, "new etcd writer-pause")}, "env two", dir), old, "env two")
	for _, want := range []string{
		`<a href="#redis-pause-unfenced">pause</a></td><td>unfenced</td><td>bite</td><td>5 (5)`,
		`<a href="#etcd-shared-writer-pause-unfenced">shared/writer-pause</a></td><td>unfenced</td><td>bite</td><td>7 (7)`,
		`<div class="run" id="redis-pause-unfenced">`, "<li>old redis pause</li>", "<li>new etcd writer-pause</li>", "the latest run: env two.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the merged page lacks %q", want)
		}
	}
	for _, gone := range []string{"old etcd writer-pause", "a row the code no longer runs"} {
		if strings.Contains(got, gone) {
			t.Errorf("the merged page keeps %q", gone)
		}
	}
	if n := strings.Count(got, `<div class="run" id=`); n != 2 {
		t.Errorf("the merged page has %d timelines, want 2", n)
	}
	if again := mergePage(page(nil, "env two", dir), got, "env two"); again != got {
		t.Errorf("merging an empty run changed the page")
	}
}

// The committed REPORT.md is what the code writes: read and written again
// with no new rows, it comes out the same (a hand edit of its generated
// text, or code whose text changed without the file, shows here).
func TestReportCommittedIsGenerated(t *testing.T) {
	b, err := os.ReadFile("REPORT.md")
	if err != nil {
		t.Fatal(err)
	}
	if got := renderReport(parseReport(string(b))); got != string(b) {
		t.Fatalf("REPORT.md read and written again differs at byte %d; write it again: %s", firstDiff(got, string(b)), Command)
	}
}

// firstDiff returns the offset of the first byte where a and b differ.
func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
