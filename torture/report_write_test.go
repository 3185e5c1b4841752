package torture

import (
	"fmt"
	"github.com/distlock/distlock/testserver"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// res is a result of row (backend, scenario ID, mode) with the code's
// expectation for it.
func res(backend, id string, mode Mode, rounds int, note string) *Result {
	name, variant, _ := strings.Cut(id, "/")
	r := &Result{Backend: backend, Scenario: name, Variant: variant, Mode: mode, Rounds: rounds, Effective: rounds, Notes: []string{"round 0: " + note}}
	for _, sc := range Scenarios {
		if sc.ID() == id {
			r.Expect = sc.Expect[backend]
		}
	}
	return r
}

// mergeMD merges the report of results (run with env) into the report old.
func mergeMD(t *testing.T, results []*Result, env, old string) string {
	t.Helper()
	prev, err := parseReport(old)
	if err != nil {
		t.Fatal(err)
	}
	return renderReport(mergeReport(reportOf(results, env), prev))
}

// mergeHTML merges the page of results into the page old, as WriteReport
// does with the reports: oldMD is old's report.
func mergeHTML(t *testing.T, results []*Result, env, old, oldMD, dir string) string {
	t.Helper()
	prev, err := parsePage(old)
	if err != nil {
		t.Fatal(err)
	}
	prevMD, err := parseReport(oldMD)
	if err != nil {
		t.Fatal(err)
	}
	return renderPage(mergePage(pageOf(results, dir), prev, mergeReport(reportOf(results, env), prevMD)))
}

// TestReportMerge: a run of some rows replaces their rows and findings'
// lines in REPORT.md and keeps the others; the code's text (Not run,
// titles) is written anew; rows of a scenario the code no longer runs on a
// backend are dropped; the runs of the kept rows stay listed, with the
// rows they still give.
func TestReportMerge(t *testing.T) {
	old := markdown([]*Result{
		res(backendRedis, "pause", Unfenced, 5, "old redis pause"),
		res(backendRedis, "pause", Fenced, 5, "old redis pause fenced"),
		res(backendEtcd, "shared/writer-pause", Unfenced, 5, "old etcd writer-pause"),
		res(backendEtcd, "shared/writer-pause", Fenced, 5, "old etcd writer-pause fenced"),
		res(backendFile, "shared/writer-pause", Unfenced, 5, "a row the code no longer runs"),
	}, "env one")
	// Rows of a backend and scenario the code does not run are dropped.
	if !strings.Contains(old, "a row the code no longer runs") {
		t.Fatalf("the fixture's file row is not in the old report:\n%s", old)
	}
	got := mergeMD(t, []*Result{
		res(backendEtcd, "shared/writer-pause", Unfenced, 7, "new etcd writer-pause"),
		res(backendEtcd, "shared/writer-pause", Fenced, 7, "new etcd writer-pause fenced"),
	}, "env two", old)

	for _, want := range []string{
		"| redis | pause | unfenced | bite | 5 (5) |", "| redis | pause | fenced | bite | 5 (5) |",
		"| etcd | shared/writer-pause | unfenced | bite | 7 (7) |", "| etcd | shared/writer-pause | fenced | bite | 7 (7) |",
		"Example: old redis pause.", "Example: new etcd writer-pause.", "Example: new etcd writer-pause fenced.",
		"\n## Runs\n\n- env one. Rows: on redis: pause.\n- env two. Rows: on etcd: shared/writer-pause.\n",
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
	if a, b := section(got, "## Not run"), section(renderReport(mergeReport(reportOf(nil, "x"), mustParse(t, got))), "## Not run"); a != b {
		t.Errorf("the merged report's Not run section is not the code's:\n%s\nwant\n%s", a, b)
	}
	// Merging a run of nothing changes nothing; merging twice is merging once.
	if again := mergeMD(t, nil, "env three", got); again != got {
		t.Errorf("merging an empty run changed the report:\n%s\nwant\n%s", again, got)
	}
	// A run of every row the old report had leaves no old run listed.
	rows := []*Result{
		res(backendRedis, "pause", Unfenced, 9, "n"), res(backendRedis, "pause", Fenced, 9, "n"),
		res(backendEtcd, "shared/writer-pause", Unfenced, 9, "n"), res(backendEtcd, "shared/writer-pause", Fenced, 9, "n"),
	}
	if m, all := mergeMD(t, rows, "env four", got), markdown(rows, "env four"); m != all {
		t.Errorf("a run of every row was merged with the old report:\n%s", section(m, "## Runs"))
	}
}

func mustParse(t *testing.T, md string) reportDoc {
	t.Helper()
	d, err := parseReport(md)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestReportMergeMode: a run of one store mode of a scenario (-run
// 'TestTorture/postgres/permit/partition/unfenced') replaces that mode's
// row and keeps the scenario's other modes' rows, findings' lines, and
// the page's rows and timelines.
func TestReportMergeMode(t *testing.T) {
	dir := t.TempDir()
	var old []*Result
	for _, m := range Modes(backendPG) {
		old = append(old, res(backendPG, "permit/partition", m, 5, "old "+m.String()))
	}
	oldMD, oldPage := markdown(old, "env one"), page(old, dir)
	run := []*Result{res(backendPG, "permit/partition", Unfenced, 7, "new unfenced")}
	got := mergeMD(t, run, "env two", oldMD)
	for _, want := range []string{
		"| postgres | permit/partition | unfenced | bite | 7 (7) |", "| postgres | permit/partition | fenced | bite | 5 (5) |", "| postgres | permit/partition | pg-fenced | bite | 5 (5) |",
		"- postgres, unfenced: ", "- postgres, fenced: ", "- postgres, pg-fenced: ", "Example: old fenced.", "Example: old pg-fenced.", "Example: new unfenced.",
		"\n- env one. Rows: on postgres: permit/partition (fenced and pg-fenced).\n- env two. Rows: on postgres: permit/partition (unfenced).\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the merged report lacks %q", want)
		}
	}
	if strings.Contains(got, "old unfenced") {
		t.Errorf("the merged report keeps the replaced row's line")
	}
	pg := mergeHTML(t, run, "env two", oldPage, oldMD, dir)
	for _, want := range []string{
		`<div class="run" id="postgres-permit-partition-fenced">`, `<div class="run" id="postgres-permit-partition-pg-fenced">`,
		"<li>round 0: old fenced</li>", "<li>round 0: old pg-fenced</li>", "<li>round 0: new unfenced</li>",
	} {
		if !strings.Contains(pg, want) {
			t.Errorf("the merged page lacks %q", want)
		}
	}
	if n := strings.Count(pg, "<tr class="); n != 3 {
		t.Errorf("the merged page has %d rows, want 3", n)
	}
}

// TestReportMergeRuns: a run whose rows have all been replaced is no
// longer listed; a parsed list of rows is what was written.
func TestReportMergeRuns(t *testing.T) {
	a := markdown([]*Result{res(backendRedis, "pause", Unfenced, 5, "a"), res(backendRedis, "pause", Fenced, 5, "a"), res(backendEtcd, "pause", Fenced, 5, "a")}, "env a")
	b := mergeMD(t, []*Result{res(backendEtcd, "pause", Fenced, 6, "b")}, "env b", a)
	if want := "\n## Runs\n\n- env a. Rows: on redis: pause.\n- env b. Rows: on etcd: pause (fenced).\n"; !strings.HasSuffix(b, want[1:]) || !strings.Contains(b, want) {
		t.Errorf("runs after b:\n%s\nwant%s", section(b, "## Runs"), want)
	}
	c := mergeMD(t, []*Result{res(backendRedis, "pause", Unfenced, 7, "c"), res(backendRedis, "pause", Fenced, 7, "c")}, "env c", b)
	if want := "\n## Runs\n\n- env b. Rows: on etcd: pause (fenced).\n- env c. Rows: on redis: pause.\n"; !strings.Contains(c, want) {
		t.Errorf("runs after c:\n%s\nwant%s", section(c, "## Runs"), want)
	}
	keys := []reportKey{{backendRedis, "pause", "unfenced"}, {backendRedis, "pause", "fenced"}, {backendPG, "permit/partition", "pg-fenced"}, {backendPG, "delay", "fenced"}, {backendPG, "delay", "unfenced"}}
	got, err := parseKeys(formatKeys(keys))
	sortKeys(keys)
	if err != nil || !slices.Equal(got, keys) {
		t.Errorf("parseKeys(%q) = %v, %v; want %v", formatKeys(keys), got, err, keys)
	}
}

// TestReportMergeOldPreamble: a report written before the Runs section
// had the run's environment in its preamble; it is read as a run, which
// gives every row.
func TestReportMergeOldPreamble(t *testing.T) {
	old := "# Torture report\n\nFault-injection runs of distlock against real servers: ...\n\n    " + Command + "\n\nEnvironment: 2026-12-01; linux.\n\n" + histories + "\n\n## redis\n\n" + tableHeader +
		"| redis | pause | unfenced | bite | 5 (5) | 3 | Ok/Ok/Illegal | 20 | 15 | 0 | 5/0/5 | 10 | 0 | 0 | - | bites |\n\n## Scenarios and findings\n\n### pause\n\nTitle.\n\n- redis, unfenced: bites.\n"
	got := mergeMD(t, nil, "env", old)
	for _, want := range []string{"\n## Runs\n\n- 2026-12-01; linux. Rows: on redis: pause (unfenced).\n", "| redis | pause | unfenced | bite | 5 (5) |", "\n- redis, unfenced: bites.\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the merged report lacks %q", want)
		}
	}
	if strings.Contains(got, "Environment: ") {
		t.Errorf("the merged report keeps the old preamble's Environment line")
	}
}

// TestReportPreambleNotRun: in a report with a Runs section, a paragraph
// of the preamble that the code no longer writes (reworded text) is not a
// run.
func TestReportPreambleNotRun(t *testing.T) {
	md := markdown([]*Result{res(backendRedis, "pause", Unfenced, 5, "a")}, "env a")
	md = strings.Replace(md, histories, "An earlier wording of the pointer to the page.", 1)
	got := mergeMD(t, nil, "env", md)
	if strings.Contains(got, "earlier wording") {
		t.Errorf("a reworded preamble paragraph was kept as a run:\n%s", section(got, "## Runs"))
	}
}

// TestReportMergeChecksCode: a kept row whose expectation is not the
// code's is stale and dropped, and the code's rows the report lacks are
// listed under Not run with the command that runs them.
func TestReportMergeChecksCode(t *testing.T) {
	old := markdown([]*Result{res(backendRedis, "pause", Unfenced, 5, "a"), res(backendRedis, "pause", Fenced, 5, "a")}, "env a")
	old = strings.Replace(old, "| redis | pause | fenced | bite |", "| redis | pause | fenced | hold |", 1)
	got := mergeMD(t, nil, "env", old)
	if strings.Contains(got, "| redis | pause | fenced |") || strings.Contains(got, "- redis, fenced: ") {
		t.Errorf("a row whose expectation is not the code's was kept")
	}
	for _, want := range []string{
		"| redis | pause | not run since it was added (fenced store): run `cd torture && go test . -run 'TestTorture/^redis$/^pause$/^fenced$' -timeout 60m -args -torture.full` |",
		"| postgres | permit/partition | not run since it was added (pg-fenced store): run `cd torture && go test . -run 'TestTorture/^postgres$/^permit$/^partition$/^pg-fenced$' -timeout 60m -args -torture.full` |",
		"- env a. Rows: on redis: pause (unfenced).\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the merged report lacks %q", want)
		}
	}
	if strings.Contains(got, "| redis | pause | not run since it was added (unfenced") {
		t.Errorf("a row the report has is listed as not run")
	}
}

// TestWriteReport: the first run writes both files; a run of some rows
// merged into them keeps the two in step (the page has the report's rows);
// a malformed file is an error naming its line, and neither file is
// written then.
func TestWriteReport(t *testing.T) {
	dir := t.TempDir()
	p := Params{Rounds: 5, Warm: 1, TTL: time.Second}
	first := []*Result{res(backendRedis, "pause", Unfenced, 5, "a"), res(backendRedis, "pause", Fenced, 5, "a"), res(backendPG, "delay", Unfenced, 5, "a"), res(backendPG, "delay", Fenced, 5, "a")}
	if err := WriteReport(dir, first, p); err != nil {
		t.Fatal(err)
	}
	if err := WriteReport(dir, []*Result{res(backendPG, "delay", Fenced, 7, "b"), res(backendEtcd, "pause", Unfenced, 7, "b")}, p); err != nil {
		t.Fatal(err)
	}
	mdName, pageName := filepath.Join(dir, "REPORT.md"), filepath.Join(dir, "report", "index.html")
	md, err := os.ReadFile(mdName)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := os.ReadFile(pageName)
	if err != nil {
		t.Fatal(err)
	}
	rd, pd := mustParse(t, string(md)), mustParsePage(t, string(pg))
	want := []reportKey{{backendRedis, "pause", "unfenced"}, {backendRedis, "pause", "fenced"}, {backendEtcd, "pause", "unfenced"}, {backendPG, "delay", "unfenced"}, {backendPG, "delay", "fenced"}}
	if got := sortedKeys(rd.rows); !slices.Equal(got, want) {
		t.Errorf("REPORT.md's rows are %v, want %v", got, want)
	}
	if got := sortedKeys(pd.rows); !slices.Equal(got, want) {
		t.Errorf("index.html's rows are %v, want %v", got, want)
	}
	if got := sortedKeys(pd.runs); !slices.Equal(got, want) {
		t.Errorf("index.html's timelines are %v, want %v", got, want)
	}
	if !strings.Contains(string(md), "| postgres | delay | fenced | bite | 7 (7) |") || !strings.Contains(string(pg), "<li>round 0: b</li>") {
		t.Errorf("the second run's rows are missing")
	}
	if len(rd.runs) != 2 {
		t.Errorf("REPORT.md lists %d runs, want 2", len(rd.runs))
	}
	// A malformed row: an error naming the line, and nothing written.
	bad := strings.Replace(string(md), "| redis | pause | fenced | bite |", "| redis | pause | fenced |", 1)
	if err := os.WriteFile(mdName, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	line := strings.Count(bad[:strings.Index(bad, "| redis | pause | fenced |")], "\n") + 1
	err = WriteReport(dir, []*Result{res(backendRedis, "delay", Unfenced, 1, "c")}, p)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("line %d:", line)) {
		t.Errorf("WriteReport with a malformed row: %v, want an error naming line %d", err, line)
	}
	if b, _ := os.ReadFile(mdName); string(b) != bad {
		t.Errorf("REPORT.md was written despite the error")
	}
	if b, _ := os.ReadFile(pageName); string(b) != string(pg) {
		t.Errorf("index.html was written despite the error")
	}
	// The run's rows are not lost: written alone beside the files.
	newMD, err := os.ReadFile(mdName + ".new")
	if err != nil || !strings.Contains(string(newMD), "| redis | delay | unfenced |") || strings.Contains(string(newMD), "| postgres | delay | fenced | bite | 7 (7) |") {
		t.Errorf("REPORT.md.new (%v) does not hold the failed merge's run alone:\n%s", err, newMD)
	}
	if newPage, err := os.ReadFile(pageName + ".new"); err != nil || !strings.Contains(string(newPage), "<li>round 0: c</li>") {
		t.Errorf("index.html.new (%v) does not hold the failed merge's run", err)
	}
}

func mustParsePage(t *testing.T, s string) pageDoc {
	t.Helper()
	d, err := parsePage(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestReportEnvironment: the environment names the PostgreSQL server's
// version when the run used it.
func TestReportEnvironment(t *testing.T) {
	testserver.PostgresBin(t, "postgres")
	env := environment(Params{}, []*Result{{Backend: backendPG}})
	if !strings.Contains(env, "postgres ") || strings.Contains(env, "postgres not found") || strings.Contains(env, "postgres (unknown") {
		t.Errorf("environment lacks the postgres version: %s", env)
	}
	if env := environment(Params{}, []*Result{{Backend: backendRedis}}); strings.Contains(env, "postgres") {
		t.Errorf("environment of a run without postgres names it: %s", env)
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
// a run of some rows does not replace, and takes its own; its header
// speaks of every run, not the latest.
func TestReportMergePage(t *testing.T) {
	dir := t.TempDir()
	old := []*Result{
		res(backendRedis, "pause", Unfenced, 5, "old redis pause"),
		res(backendEtcd, "shared/writer-pause", Unfenced, 5, "old etcd writer-pause"),
		res(backendFile, "shared/writer-pause", Unfenced, 5, "a row the code no longer runs"),
	}
	oldPage, oldMD := page(old, dir), markdown(old, "env one")
	run := []*Result{res(backendEtcd, "shared/writer-pause", Unfenced, 7, "new etcd writer-pause")}
	got := mergeHTML(t, run, "env two", oldPage, oldMD, dir)
	for _, want := range []string{
		`<a href="#redis-pause-unfenced">pause</a></td><td>unfenced</td><td>bite</td><td>5 (5)`,
		`<a href="#etcd-shared-writer-pause-unfenced">shared/writer-pause</a></td><td>unfenced</td><td>bite</td><td>7 (7)`,
		`<div class="run" id="redis-pause-unfenced">`, "<li>round 0: old redis pause</li>", "<li>round 0: new etcd writer-pause</li>", "the rows come from the runs listed in REPORT.md",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the merged page lacks %q", want)
		}
	}
	for _, gone := range []string{"old etcd writer-pause", "a row the code no longer runs", "the latest run"} {
		if strings.Contains(got, gone) {
			t.Errorf("the merged page keeps %q", gone)
		}
	}
	if n := strings.Count(got, `<div class="run" id=`); n != 2 {
		t.Errorf("the merged page has %d timelines, want 2", n)
	}
	if again := mergeHTML(t, nil, "env three", got, mergeMD(t, run, "env two", oldMD), dir); again != got {
		t.Errorf("merging an empty run changed the page")
	}
}

// The committed REPORT.md and report/index.html are what the code writes:
// read and written again with no new rows, they come out the same (a hand
// edit of their generated text, or code whose text changed without the
// files, shows here).
func TestReportCommittedIsGenerated(t *testing.T) {
	b, err := os.ReadFile("REPORT.md")
	if err != nil {
		t.Fatal(err)
	}
	d, err := parseReport(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if got := renderReport(d); got != string(b) {
		t.Fatalf("REPORT.md read and written again differs at byte %d; write it again: %s", firstDiff(got, string(b)), Command)
	}
	// So is index.html, and it has no row REPORT.md does not have.
	h, err := os.ReadFile("report/index.html")
	if err != nil {
		t.Fatal(err)
	}
	pd, err := parsePage(string(h))
	if err != nil {
		t.Fatal(err)
	}
	if got := renderPage(mergePage(pageDoc{}, pd, d)); got != string(h) {
		t.Fatalf("report/index.html read and written again differs at byte %d; write it again: %s", firstDiff(got, string(h)), Command)
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
