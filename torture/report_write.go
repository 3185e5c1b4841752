package torture

import (
	"errors"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Command is the command, run from the repository root, that produces the
// committed report.
const Command = "cd torture && go test . -run TestTorture -timeout 60m -args -torture.full"

// WriteReport writes dir/REPORT.md and dir/report/index.html (with an SVG
// timeline per run, linking porcupine's visualizations kept in
// dir/report/histories) for results obtained with p. REPORT.md and
// index.html are committed; the histories (megabytes, one page per run) are
// not, so the report says that they come from running Command.
//
// A run of some rows (go test -run) replaces those rows only: a row is a
// backend, a scenario and a store mode, and the rows of REPORT.md that the
// run does not have are kept (see mergeReport), and so are their lines in
// the findings, while the text that comes from the scenarios (the "Not
// run" table, their titles and findings) is written anew; so are
// index.html's rows and timelines (mergePage), which keeps the rows
// REPORT.md keeps. Both files are read and parsed before either is written:
// a malformed one is an error naming its line, and neither is written.
func WriteReport(dir string, results []*Result, p Params) error {
	env := environment(p, results)
	mdName := filepath.Join(dir, "REPORT.md")
	rdir := filepath.Join(dir, "report")
	pageName := filepath.Join(rdir, "index.html")
	oldMD, err := os.ReadFile(mdName)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	oldPage, err := os.ReadFile(pageName)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	prev, err := parseReport(string(oldMD))
	if err != nil {
		err = fmt.Errorf("%s: %w", mdName, err)
	}
	prevPage, perr := parsePage(string(oldPage))
	if perr != nil && err == nil {
		err = fmt.Errorf("%s: %w", pageName, perr)
	}
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return err
	}
	if err != nil {
		// The run's results are not lost with the merge: written alone
		// beside the files, for a person to merge or to replace them.
		prev, _ = parseReport("")
		prevPage, _ = parsePage("")
		md := mergeReport(reportOf(results, env), prev)
		if werr := writeFile(mdName+".new", renderReport(md)); werr != nil {
			return errors.Join(err, werr)
		}
		if werr := writeFile(pageName+".new", renderPage(mergePage(pageOf(results, rdir), prevPage, md))); werr != nil {
			return errors.Join(err, werr)
		}
		return fmt.Errorf("%w; this run's rows alone are in %s.new and %s.new", err, mdName, pageName)
	}
	md := mergeReport(reportOf(results, env), prev)
	pg := mergePage(pageOf(results, rdir), prevPage, md)
	if err := writeFile(mdName, renderReport(md)); err != nil {
		return err
	}
	return writeFile(pageName, renderPage(pg))
}

// writeFile writes name through a temporary file renamed over it, so that
// an interrupted write leaves the previous file whole, never a part of
// the new one (which the next run could not merge).
func writeFile(name, text string) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// environment describes where and how the report was made: the machine,
// Go, the parameters, and the versions of the servers results ran on that
// tell it cheaply (ZooKeeper's is not asked: its version needs the server
// started or its jar's name guessed).
func environment(p Params, results []*Result) string {
	// version returns the word after prefix in bin's version output.
	version := func(bin, name, prefix string) string {
		out, err := exec.Command(bin, "--version").Output()
		if err != nil {
			return name + " not found"
		}
		_, v, ok := strings.Cut(string(out), prefix)
		if !ok || len(strings.Fields(v)) == 0 {
			return name + " (unknown version)"
		}
		return name + " " + strings.Fields(v)[0]
	}
	servers := version("redis-server", "redis-server", "v=") + ", " + version("etcd", "etcd", "Version:")
	if slices.ContainsFunc(results, func(r *Result) bool { return r.Backend == backendPG }) {
		servers += ", " + version(postgresBin(), "postgres", "(PostgreSQL) ")
	}
	return fmt.Sprintf("%s; %s/%s, %d CPUs; %s; %s; %d fault rounds per run, each after %d lock/increment/release cycle(s) per worker; lock TTL %v (scenarios lengthen it where they say so); worker Clients with drift %v and safety margin %v",
		time.Now().UTC().Format("2006-01-02"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(),
		servers, p.Rounds, p.Warm, p.TTL, workerDrift, workerMargin)
}

// postgresBin is the postgres program the harness starts (as
// testserver.PostgresBin finds it): the one in the highest-versioned
// /usr/lib/postgresql/*/bin, else "postgres" from PATH.
func postgresBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	best, bestV := "postgres", -1.0
	for _, d := range dirs {
		if v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(d))), 64); err == nil && v > bestV {
			best, bestV = d, v
		}
	}
	return best
}

// histories is REPORT.md's pointer to the page, and says which part of it
// only a local run has.
const histories = "A timeline of every run is in [report/index.html](report/index.html). Porcupine's visualization of each checked history, which that page links, is written to report/histories/ by the command above; those pages are not committed (they are megabytes)."

// otherReports points REPORT.md to the reports of the torture module's
// other modes.
const otherReports = "Random schedules of overlapping faults on every backend (the nemesis mode) are in [NEMESIS.md](NEMESIS.md), and a steady-state soak of 10,000 held locks in [SOAK.md](SOAK.md)."

// markdown renders REPORT.md for results alone (mergeReport adds the rows
// of an earlier report that results do not replace).
func markdown(results []*Result, env string) string {
	return renderReport(reportOf(results, env))
}

// reportDoc is what REPORT.md holds of runs, as lines: the table row and
// the findings' line of each row (a backend, scenario and store mode),
// and the runs they come from. The rest of the file comes from the code
// (the scenarios).
type reportDoc struct {
	rows  map[reportKey]string // table rows
	lines map[reportKey]string // findings' lines ("- backend, mode: ...")
	runs  []reportRun          // "## Runs" items, oldest first
}

// reportRun is an item of REPORT.md's Runs: what the run was, and the rows
// of the report that come from it (each row from one run, the latest that
// had it).
type reportRun struct {
	text string // without "- " and the row list
	keys []reportKey
}

// reportKey is a row of the report: a backend, a scenario (its ID) and a
// store mode.
type reportKey struct{ backend, scenario, mode string }

// keyOf is r's row.
func keyOf(r *Result) reportKey { return reportKey{r.Backend, r.id(), r.Mode.String()} }

// reportOf is the reportDoc of one run's results.
func reportOf(results []*Result, env string) reportDoc {
	d := reportDoc{rows: map[reportKey]string{}, lines: map[reportKey]string{}}
	var keys []reportKey
	for _, r := range results {
		k := keyOf(r)
		d.rows[k], d.lines[k] = tableRow(r), findingLine(r)
		keys = append(keys, k)
	}
	if len(results) > 0 {
		d.runs = []reportRun{{text: env + ".", keys: keys}}
	}
	return d
}

// runsNote opens REPORT.md's sentence on runs of some rows.
const runsNote = "A run of some rows"

// rowsMark separates a Runs item's text from the list of its rows.
const rowsMark = " Rows: "

// reportKinds are the backends in report order.
var reportKinds = []string{backendRedis, backendRedlock, backendEtcd, backendFile, backendZK, backendPG, backendGateway}

// codeExpect returns what the code expects of row k ("bite", "hold",
// "n/a"), and false if the code has no such row: its scenario is gone, or
// does not run on its backend or in its store mode.
func codeExpect(k reportKey) (string, bool) {
	if !slices.ContainsFunc(Modes(k.backend), func(m Mode) bool { return m.String() == k.mode }) {
		return "", false
	}
	for _, sc := range Scenarios {
		if sc.ID() == k.scenario {
			e, ok := sc.Expect[k.backend]
			return e.String(), ok
		}
	}
	return "", false
}

// codeKeys are the rows the code has, in report order.
func codeKeys() []reportKey {
	var keys []reportKey
	for _, be := range reportKinds {
		for _, sc := range Scenarios {
			if _, ok := sc.Expect[be]; !ok {
				continue
			}
			for _, m := range Modes(be) {
				keys = append(keys, reportKey{be, sc.ID(), m.String()})
			}
		}
	}
	return keys
}

// rowExpect is the expect cell of a table row.
func rowExpect(row string) string {
	cells := strings.Split(row, " | ")
	if len(cells) < 4 {
		return ""
	}
	return cells[3]
}

// mergeReport returns the report of one run's rows cur with the rows of
// the earlier report prev that cur does not replace: a row (backend,
// scenario, store mode) that cur does not have keeps prev's table row and
// findings' line, if the code still has that row and expects of it what
// the row says (else the row is stale, and dropped). Each of prev's runs
// keeps the rows it still gives, and is dropped if it gives none; cur's
// run comes after them. Everything else (the legend, "Not run", the
// scenarios' titles and findings) is the code's when rendered.
func mergeReport(cur, prev reportDoc) reportDoc {
	out := reportDoc{rows: map[reportKey]string{}, lines: map[reportKey]string{}}
	for _, run := range prev.runs {
		var keys []reportKey
		for _, k := range run.keys {
			row, ok := prev.rows[k]
			if _, replaced := cur.rows[k]; replaced || !ok {
				continue
			}
			if e, has := codeExpect(k); !has || e != rowExpect(row) {
				continue
			}
			out.rows[k] = row
			if l, ok := prev.lines[k]; ok {
				out.lines[k] = l
			}
			keys = append(keys, k)
		}
		if len(keys) > 0 {
			out.runs = append(out.runs, reportRun{run.text, keys})
		}
	}
	for k, row := range cur.rows {
		out.rows[k], out.lines[k] = row, cur.lines[k]
	}
	out.runs = append(out.runs, cur.runs...)
	return out
}

// parseReport reads the runs' lines of a REPORT.md. Paragraphs of its
// preamble that the code does not write are read as runs if the file has
// no Runs section (the "Environment:" line of a report written before the
// section was); else they are the code's earlier text, and ignored. A Runs
// item without a list of rows (or a preamble run) is taken to give the
// rows no other run lists. A row or findings' line that cannot be read is
// an error naming its line.
func parseReport(md string) (reportDoc, error) {
	d := reportDoc{rows: map[reportKey]string{}, lines: map[reportKey]string{}}
	lines := strings.Split(md, "\n")
	hasRuns := slices.Contains(lines, "## Runs")
	section, scenario := "", ""
	var keyless []int // runs without a row list
	for i, line := range lines {
		errorf := func(format string, a ...any) error {
			return fmt.Errorf("line %d: %s: %q", i+1, fmt.Sprintf(format, a...), line)
		}
		switch {
		case strings.HasPrefix(line, "## "):
			section, scenario = strings.TrimPrefix(line, "## "), ""
			continue
		case strings.HasPrefix(line, "### "):
			scenario = strings.TrimPrefix(line, "### ")
			continue
		}
		switch {
		case section == "" && !hasRuns && line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "Fault-injection runs") &&
			!strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, runsNote) && line != histories && line != otherReports:
			keyless = append(keyless, len(d.runs))
			d.runs = append(d.runs, reportRun{text: strings.TrimPrefix(line, "Environment: ")})
		case section == "Runs" && strings.HasPrefix(line, "- "):
			item := strings.TrimPrefix(line, "- ")
			i := strings.LastIndex(item, rowsMark)
			if i < 0 {
				keyless = append(keyless, len(d.runs))
				d.runs = append(d.runs, reportRun{text: item})
				continue
			}
			keys, err := parseKeys(item[i+len(rowsMark):])
			if err != nil {
				return d, errorf("%v", err)
			}
			d.runs = append(d.runs, reportRun{item[:i], keys})
		case slices.Contains(reportKinds, section) && strings.HasPrefix(line, "|"):
			cells := strings.Split(line, " | ")
			if cells[0] == "| backend" || strings.HasPrefix(line, "|---") {
				continue // the header
			}
			if len(cells) != 16 || cells[0] != "| "+section || !strings.HasSuffix(line, " |") {
				return d, errorf("a row of the %s table must have 16 cells and name its backend first", section)
			}
			k := reportKey{section, cells[1], cells[2]}
			if _, dup := d.rows[k]; dup {
				return d, errorf("a second row of %s %s %s", k.backend, k.scenario, k.mode)
			}
			d.rows[k] = line
		case section == "Scenarios and findings" && scenario != "" && strings.HasPrefix(line, "- "):
			be, rest, ok := strings.Cut(strings.TrimPrefix(line, "- "), ", ")
			if !ok || !slices.Contains(reportKinds, be) {
				continue // the scenario's findings
			}
			mode, _, ok := strings.Cut(rest, ": ")
			if !ok || mode == "" {
				return d, errorf("a findings' line must read \"- backend, mode: ...\"")
			}
			d.lines[reportKey{be, scenario, mode}] = line
		}
	}
	if len(keyless) > 0 {
		listed := map[reportKey]bool{}
		for _, run := range d.runs {
			for _, k := range run.keys {
				listed[k] = true
			}
		}
		var rest []reportKey
		for _, k := range sortedKeys(d.rows) {
			if !listed[k] {
				rest = append(rest, k)
			}
		}
		for _, i := range keyless {
			d.runs[i].keys = rest
		}
	}
	return d, nil
}

// sortedKeys returns the keys of m in report order (backends, scenarios,
// store modes), those the code does not know last, sorted.
func sortedKeys[V any](m map[reportKey]V) []reportKey {
	keys := make([]reportKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortKeys(keys)
	return keys
}

// sortKeys sorts keys in report order.
func sortKeys(keys []reportKey) {
	order := map[reportKey]int{}
	for i, k := range codeKeys() {
		order[k] = i
	}
	slices.SortFunc(keys, func(a, b reportKey) int {
		i, aok := order[a]
		j, bok := order[b]
		switch {
		case aok && bok:
			return i - j
		case aok:
			return -1
		case bok:
			return 1
		}
		return strings.Compare(a.backend+"\x00"+a.scenario+"\x00"+a.mode, b.backend+"\x00"+b.scenario+"\x00"+b.mode)
	})
}

// formatKeys writes a run's rows: per backend ("on redis: ..."), its
// scenarios, each with the store modes in parentheses unless it has every
// mode the backend runs in: "on postgres: pause, delay (unfenced and
// fenced); on etcd: pause".
func formatKeys(keys []reportKey) string {
	keys = slices.Clone(keys)
	sortKeys(keys)
	var parts []string
	for i := 0; i < len(keys); {
		be := keys[i].backend
		var scs []string
		for i < len(keys) && keys[i].backend == be {
			sc := keys[i].scenario
			var modes []string
			for i < len(keys) && keys[i].backend == be && keys[i].scenario == sc {
				modes = append(modes, keys[i].mode)
				i++
			}
			all := len(modes) == len(Modes(be))
			for j, m := range Modes(be) {
				all = all && modes[j] == m.String()
			}
			if !all {
				sc += " (" + strings.Join(modes, " and ") + ")"
			}
			scs = append(scs, sc)
		}
		parts = append(parts, "on "+be+": "+strings.Join(scs, ", "))
	}
	return strings.Join(parts, "; ") + "."
}

// parseKeys reads what formatKeys writes.
func parseKeys(s string) ([]reportKey, error) {
	s, ok := strings.CutSuffix(s, ".")
	if !ok {
		return nil, fmt.Errorf("a list of rows ends with a period")
	}
	var keys []reportKey
	for _, part := range strings.Split(s, "; ") {
		be, list, ok := strings.Cut(strings.TrimPrefix(part, "on "), ": ")
		if !ok || !strings.HasPrefix(part, "on ") || be == "" || list == "" {
			return nil, fmt.Errorf("a list of rows reads \"on BACKEND: SCENARIO, SCENARIO (MODE and MODE); on ...\"")
		}
		for _, sc := range strings.Split(list, ", ") {
			id, modes, has := strings.Cut(sc, " (")
			if !has {
				for _, m := range Modes(be) {
					keys = append(keys, reportKey{be, id, m.String()})
				}
				continue
			}
			modes, ok := strings.CutSuffix(modes, ")")
			if !ok || id == "" {
				return nil, fmt.Errorf("scenario %q of %s: store modes are in parentheses", sc, be)
			}
			for _, m := range strings.Split(modes, " and ") {
				keys = append(keys, reportKey{be, id, m})
			}
		}
	}
	return keys, nil
}

// runCommand is the command that runs row k alone (each level of its
// test's name anchored).
func runCommand(k reportKey) string {
	var pat []string
	for _, part := range strings.Split("TestTorture/"+k.backend+"/"+k.scenario+"/"+k.mode, "/")[1:] {
		pat = append(pat, "^"+part+"$")
	}
	return strings.Replace(Command, "-run TestTorture", "-run 'TestTorture/"+strings.Join(pat, "/")+"'", 1)
}

// renderReport writes REPORT.md: d's rows in the order of the backends,
// scenarios and store modes, the code's rows d lacks under "Not run", and
// the rest from the code.
func renderReport(d reportDoc) string {
	var b strings.Builder
	b.WriteString("# Torture report\n\n")
	b.WriteString("Fault-injection runs of distlock against real servers: every scenario runs once with an unfenced store (the baseline: it must show the fault biting) and once with a store that refuses stale fencing tokens (on PostgreSQL also with the store kept in PostgreSQL and fenced by pglock.Fence). Generated by\n\n")
	fmt.Fprintf(&b, "    %s\n\n", Command)
	b.WriteString(runsNote + " (with `-run 'TestTorture/BACKEND/SCENARIO/MODE'`, MODE optional) replaces those rows and keeps the others; the runs the rows come from are listed under [Runs](#runs).\n\n")
	b.WriteString(histories + "\n\n")
	b.WriteString(otherReports + "\n\n")
	b.WriteString(legend)
	keys := sortedKeys(d.rows)
	for _, be := range reportKinds {
		var rows []string
		for _, k := range keys {
			if k.backend == be {
				rows = append(rows, d.rows[k])
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n", be)
		b.WriteString(tableHeader)
		for _, row := range rows {
			b.WriteString(row + "\n")
		}
	}
	b.WriteString("\n## Not run\n\n| backend | scenario | why |\n|---|---|---|\n")
	for _, k := range codeKeys() {
		if _, ok := d.rows[k]; !ok {
			fmt.Fprintf(&b, "| %s | %s | not run since it was added (%s store): run `%s` |\n", k.backend, k.scenario, k.mode, runCommand(k))
		}
	}
	for _, n := range NotRun {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", n.Backend, n.Scenario, n.Why)
	}
	for _, sc := range Scenarios {
		for _, kind := range reportKinds {
			if _, ok := sc.Expect[kind]; !ok && sc.Why[kind] != "" {
				fmt.Fprintf(&b, "| %s | %s | not applicable: %s |\n", kind, sc.ID(), sc.Why[kind])
			}
		}
	}
	b.WriteString("\n## Scenarios and findings\n\n")
	for _, sc := range Scenarios {
		fmt.Fprintf(&b, "### %s\n\n%s.\n\n", sc.ID(), upper(sc.Title))
		if f := findings[sc.ID()]; f != "" {
			b.WriteString(f + "\n\n")
		}
		for _, k := range keys {
			if l, ok := d.lines[k]; ok && k.scenario == sc.ID() {
				b.WriteString(l + "\n")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("## Runs\n\n")
	for _, run := range d.runs {
		fmt.Fprintf(&b, "- %s%s%s\n", run.text, rowsMark, formatKeys(run.keys))
	}
	return b.String()
}

// findingLine is r's line in its scenario's findings.
func findingLine(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- %s, %s: %s", r.Backend, r.Mode, r.Outcome())
	if r.Why != "" {
		fmt.Fprintf(&b, " (%s)", r.Why)
	}
	if n := firstNote(r); n != "" {
		fmt.Fprintf(&b, ". Example: %s", n)
	}
	b.WriteString(".")
	return b.String()
}

func upper(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// firstNote returns the first note of a run that tells what happened.
func firstNote(r *Result) string {
	for _, n := range r.Notes {
		if strings.HasPrefix(n, "round 0") {
			return strings.TrimPrefix(n, "round 0: ")
		}
	}
	if len(r.Notes) > 0 {
		return r.Notes[0]
	}
	return ""
}

const legend = `## How to read the tables

- **store**: unfenced (accepts every write), fenced (a fence.Register refuses a token below the highest admitted, atomically with the write) or pg-fenced (the registers are rows in PostgreSQL, and each write is a transaction that pglock.Fence refuses for such a token).
- **expect**: *bite*: the fault must show in the unfenced run; *hold*: the guard must hold in both runs; *n/a*: the fault does not apply to the backend (the run shows what happens instead).
- **rounds (fault effective)**: fault rounds, and those in which the fault took effect as designed (the other client was granted during the pause, the delayed write landed after the newer ones, the lost reply's request was executed, ...).
- **histories / verdicts**: porcupine checks three models, partitioned by lock key or resource: *mutex* (acquire/end pairs: no two holds overlap), *tokens* (each grant's token above the last), *register* (a read returns the last admitted write; a write whose token is below the highest admitted must have been refused). A hold ends when its holder's lock context is cancelled; it is counted as held only up to the last moment the holder proved it live (its context not done and its local deadline not passed, checked after a store reply), so a verdict of Illegal is proven, not guessed.
- **overlaps**: pairs of grants of one key proven held at the same instant. **stale**: writes whose token was below the highest token admitted for the resource when they arrived, and what the store did with them. **lost updates**: acknowledged increments missing from the final values. **token regressions**: grants whose token is not above that of every grant that definitely came before (or that repeat a token). **orphans**: grants left at the server for nobody after an acquire failed.
- **detection**: time from the fault to the holder's lock context being cancelled, as received by the harness (one clock: the harness's).
- **election rows**: the workers campaign in an election (package election) instead of taking a lock; a term is a grant of the election's key, so the columns read as above with "term" for "grant". Their violations also count late writes of a paused leader whose term's local deadline (Term.Deadline as it stood when the leader was stopped) did not come before another candidate's Campaign returned, and observer errors: a third process following the election with Observe received a leader out of term order, with no value or another candidate's, or of a term no grant of the run has (on ZooKeeper, but for one of a candidate whose campaign failed: its node may outlive it; on Redlock, but for one followed by the same candidate's grant with a higher token: a grant whose token is being settled), saw its channel close during the run, did not receive within 30s a term that a round ended with (held until then) or the leader elected after a restart, or did not receive "no leader" within 30s of the last resignation.
- **shared rows**: the workers' grants are locks of a read/write lock (package rwlock): the writers' are its write locks, and readers hold read locks between them. The mutex model is the write locks'; the token model takes every grant, read locks' included; an overlap is a write lock proven held with any other grant of the key (two read locks may overlap). Their violations also count stale reads used: a paused reader's read of a write whose token is above its read lock's, used as read under its lock, and late reads of a paused reader whose read lock's local deadline (as it stood when it was stopped) did not come before the writer's Acquire returned. In the fenced run the reader validates each read after making it (the store's highest admitted token for the resource must not be above its own) and discards it if not.
- **partition rows**: the workers are members of one group of package partition (4 members, 16 units) and write, for each unit they own, the unit's resource with its token (a fence per unit). A grant is a unit's, reported by its member as it comes and stamped on arrival, its call being when the member was started (a conservative interval); the models and counts read per unit as above. The cut-off member's writers write on, unchecked, after the other members took its units: the stale column counts those late writes.
`

// findings are the honest readings of each scenario; the numbers are in
// the tables.
var findings = map[string]string{
	"pause":                        "A lease cannot survive a pause between the holder's check and its write: the holder wakes up and writes with its old token after the next holder wrote. The lock itself kept its promise (the mutex model holds: the paused holder's context would be cancelled, its deadline had passed), the write did not; only the fenced store refuses it. On filelock a stopped holder keeps the flock, so nobody else is granted: safe, and blocking.",
	"delay":                        "The network, not the holder, delays the write past the TTL; its sender gave up and released, the next holder wrote, then the old write landed. No lock service can see this; the fenced store refuses it on every backend, filelock included.",
	"partition":                    "The holder's lock context is cancelled by its local deadline before the service lets the lease lapse (the mutex model holds, and detection takes about the usable TTL), but a holder that ignores its context keeps writing: fencing refuses those writes.",
	"holder-kill":                  "A killed holder's grant lapses (Redis, etcd) or is dropped at once by the kernel (filelock); the next grant has a larger token.",
	"server-kill/no-fsync":         "A Redis restarted without persistence forgets the lock and its fencing counter: a second client is granted the key while the first still holds it, and tokens restart below those already handed out. The fenced store then refuses the new holder's writes (its token is lower): fencing turns the safety failure into a liveness one (the new holder cannot write until the counter passes the old tokens), and the lock-level overlap remains.",
	"server-kill/fsync":            "With appendonly yes and appendfsync always the lock and the counter survive kill -9: the holder keeps its lock across the restart, nobody else is granted, tokens stay increasing.",
	"leader-kill":                  "etcd's lock keys, leases and revisions are in the replicated log: killing the leader neither grants the key twice nor lowers a token.",
	"failover/missed-1":            "Asynchronous replication loses the grant: the promoted replica grants the key again while the old holder still holds it. Having missed one grant, its counter hands out **the same token** again: a fence admits equal tokens (a holder may write twice), so it admits both holders and updates are lost even in the fenced run. Fencing does not save this case; only a deployment without failover to a lagging replica (or a consensus service) does.",
	"failover/missed-2":            "Having missed two grants, the promoted replica's counter is below the old holder's token: the fenced store refuses the new holder (a liveness consequence, not a safety one) and the old holder's writes are still admitted until its lease runs out.",
	"late-release/naive":           "An unconditional delete by a holder whose lease had lapsed frees the next holder's lock: a third client is granted while the second still holds it (overlap). With fencing, the second holder's later write is refused.",
	"late-release/owner-checked":   "distlock's release is owner-checked: the late holder is told its lock was lost, and the next holder's lock is untouched (a third client is refused).",
	"lost-reply/naive":             "A SET NX whose reply is lost took effect: the key is held by nobody until its TTL runs out (an orphan: a liveness failure, not a safety one).",
	"lost-reply/distlock":          "distlock's acquire after a lost reply: the request took effect at the server and was tried again (on Redis by go-redis, whose re-sent script finds its own grant and confirms it with the same token; on etcd by the Client, after the key left behind was deleted, with a new token). The server ends up holding exactly the grant the client holds, and the next client is granted promptly.",
	"lost-reply/distlock-no-retry": "The same, with the replies lost until the acquire (retries off) has given up, so that its own clean-up cannot get through either: both backends keep retrying the clean-up in the background and remove the grant after the heal, long before its lease would have lapsed (an etcd key would otherwise live as long as its session, whose keep-alives resume). The notes give the time from the heal to a clean server.",
}

// pageOf is index.html's pageDoc for results alone (mergePage adds the
// rows of an earlier page that results do not replace).
func pageOf(results []*Result, rdir string) pageDoc {
	d := pageDoc{rows: map[reportKey]string{}, runs: map[reportKey]string{}}
	for _, r := range results {
		k := keyOf(r)
		d.rows[k], d.runs[k] = pageRow(r), pageRun(r, rdir)
	}
	return d
}

// page renders index.html for results alone.
func page(results []*Result, rdir string) string {
	return renderPage(pageOf(results, rdir))
}

// pageDoc is what index.html holds of runs: the table row and the
// timeline (a div) of each row (backend, scenario, store mode).
type pageDoc struct {
	rows map[reportKey]string // <tr> lines
	runs map[reportKey]string // <div class="run"> blocks, newline-terminated
}

// pageRow is r's row of its backend's table in index.html.
func pageRow(r *Result) string {
	det := "-"
	if len(r.Detection) > 0 {
		det = fmt.Sprintf("%v / %v", Percentile(r.Detection, 50).Round(ms), Percentile(r.Detection, 99).Round(ms))
	}
	return fmt.Sprintf("<tr class=%q><td><a href=\"#%s\">%s</a></td><td>%s</td><td>%s</td><td>%d (%d)</td><td>%s</td><td>%d</td><td>%d</td><td>%d/%d/%d</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td></tr>",
		rowClass(r), anchor(r), html.EscapeString(r.id()), r.Mode, r.Expect, r.Rounds, r.Effective, r.verdicts(), r.Violations(), r.Overlaps,
		r.StaleAttempted, r.StaleRefused, r.StaleAccepted, r.LostUpdates, r.TokenRegressions, r.Orphans, det, html.EscapeString(r.Outcome()))
}

// pageRun is r's timeline block in index.html.
func pageRun(r *Result, rdir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<div class=\"run\" id=%q><h3>%s &middot; %s &middot; %s store</h3>\n", anchor(r), html.EscapeString(r.Backend), html.EscapeString(r.id()), r.Mode)
	fmt.Fprintf(&b, "<p>%s</p>\n", html.EscapeString(r.Outcome()))
	if r.Visualization != "" {
		rel, err := filepath.Rel(rdir, r.Visualization)
		if err == nil {
			fmt.Fprintf(&b, "<p><a href=%q>porcupine visualization of the history</a> (%d histories checked)</p>\n", filepath.ToSlash(rel), r.Histories)
		}
	}
	b.WriteString("<div class=\"scroll\">" + Timeline(r) + "</div>\n")
	if len(r.Notes) > 0 {
		b.WriteString("<ul>")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "<li>%s</li>", html.EscapeString(n))
		}
		b.WriteString("</ul>\n")
	}
	b.WriteString("</div>\n")
	return b.String()
}

// mergePage is mergeReport's counterpart for index.html: cur, one run's
// rows and timelines, with those of the earlier page prev for the rows
// that cur does not have and that the merged report md keeps from an
// earlier run (so the page has the report's rows, no others).
func mergePage(cur, prev pageDoc, md reportDoc) pageDoc {
	out := pageDoc{rows: map[reportKey]string{}, runs: map[reportKey]string{}}
	for k := range md.rows {
		if row, ok := cur.rows[k]; ok {
			out.rows[k], out.runs[k] = row, cur.runs[k]
		} else if row, ok := prev.rows[k]; ok {
			out.rows[k] = row
			if run, ok := prev.runs[k]; ok {
				out.runs[k] = run
			}
		}
	}
	return out
}

// parsePage reads the rows and timelines of an index.html, each keyed by
// the row its anchor names; rows of an anchor the code does not know are
// dropped. A timeline cut short is an error naming its line.
func parsePage(s string) (pageDoc, error) {
	d := pageDoc{rows: map[reportKey]string{}, runs: map[reportKey]string{}}
	keys := map[string]reportKey{}
	for _, sc := range Scenarios {
		for _, be := range reportKinds {
			for _, m := range []Mode{Unfenced, Fenced, PGFenced} {
				r := &Result{Backend: be, Scenario: sc.Name, Variant: sc.Variant, Mode: m}
				keys[anchor(r)] = keyOf(r)
			}
		}
	}
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(line, "<tr class="):
			_, rest, ok := strings.Cut(line, "<a href=\"#")
			a, _, ok2 := strings.Cut(rest, "\"")
			if !ok || !ok2 {
				return d, fmt.Errorf("line %d: a row without its anchor: %q", i+1, line)
			}
			if k, known := keys[a]; known {
				d.rows[k] = line
			}
		case strings.HasPrefix(line, "<div class=\"run\" id=\""):
			a, _, _ := strings.Cut(strings.TrimPrefix(line, "<div class=\"run\" id=\""), "\"")
			j := i
			for j < len(lines) && lines[j] != "</div>" {
				j++
			}
			if j == len(lines) {
				return d, fmt.Errorf("line %d: the timeline %s is cut short", i+1, a)
			}
			if k, known := keys[a]; known {
				d.runs[k] = strings.Join(lines[i:j+1], "\n") + "\n"
			}
			i = j
		}
	}
	return d, nil
}

// renderPage writes index.html: d's rows and timelines in the order of the
// backends, scenarios and store modes.
func renderPage(d pageDoc) string {
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><title>distlock torture report</title><style>
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:none}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
.bad{background:#ffe0e0}.good{background:#e6f7e6}.na{background:#f0f0f0}
.run{margin:2em 0;border-top:2px solid #888;padding-top:.5em}.scroll{overflow-x:auto;border:1px solid #ddd}
svg text{font:11px sans-serif}
</style></head><body>
<h1>distlock torture report</h1>
`)
	fmt.Fprintf(&b, "<p>Generated by <code>%s</code>. A run of some rows replaces their rows and timelines and keeps the others: the rows come from the runs listed in REPORT.md (its Runs section says where and when each was made, and which rows it gave).</p>\n", html.EscapeString(Command))
	b.WriteString("<p>Timelines: one lane per worker; a bar is a hold, from the grant to the end of the lock's context (red outline: lost, not released); marks are store operations: green: write admitted, orange: stale write refused, red: stale write accepted, grey: read; red dashed lines are faults. Each run links porcupine's visualization of its history (models mutex, tokens and register, partitioned by key); those pages, in histories/, are written by the command above and are not committed.</p>\n")
	var runs []string
	keys := sortedKeys(d.rows)
	for _, be := range reportKinds {
		var rows []string
		for _, k := range keys {
			if k.backend == be {
				rows = append(rows, d.rows[k])
				if run, ok := d.runs[k]; ok {
					runs = append(runs, run)
				}
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "<h2>%s</h2>\n<table><tr><th>scenario</th><th>store</th><th>expect</th><th>rounds (effective)</th><th>verdicts mutex/tokens/register</th><th>violations</th><th>overlaps</th><th>stale att./ref./acc.</th><th>lost updates</th><th>token regr.</th><th>orphans</th><th>detection p50/p99</th><th>outcome</th></tr>\n", html.EscapeString(be))
		for _, row := range rows {
			b.WriteString(row + "\n")
		}
		b.WriteString("</table>\n")
	}
	b.WriteString("<h2>Not run</h2><ul>\n")
	for _, k := range codeKeys() {
		if _, ok := d.rows[k]; !ok {
			fmt.Fprintf(&b, "<li>%s, %s, %s store: not on this page (REPORT.md has the row if it was run since it was added, and says by which run): run <code>%s</code></li>\n", k.backend, k.scenario, k.mode, html.EscapeString(runCommand(k)))
		}
	}
	for _, n := range NotRun {
		fmt.Fprintf(&b, "<li>%s, %s: %s</li>\n", n.Backend, n.Scenario, html.EscapeString(n.Why))
	}
	b.WriteString("</ul>\n")
	for _, run := range runs {
		b.WriteString(run)
	}
	b.WriteString("</body></html>\n")
	return b.String()
}

func rowClass(r *Result) string {
	switch {
	case r.Expect == ExpectNothing:
		return "na"
	case strings.HasPrefix(r.Outcome(), "VIOLATION"), strings.HasPrefix(r.Outcome(), "FAULT"), strings.HasPrefix(r.Outcome(), "FENCE"):
		return "bad"
	case r.Mode == Unfenced && r.Bit():
		return "bad"
	}
	return "good"
}

func anchor(r *Result) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(r.Backend + "-" + r.id() + "-" + r.Mode.String())
}

// Timeline renders a run's history as an SVG: a lane per worker with its
// holds and store operations, and the faults. Time runs left to right at
// a fixed scale where something happens; idle stretches longer than
// timelineGap are cut to a narrow band labelled with their length.
func Timeline(r *Result) string {
	var workers []string
	var stamps []int64
	for _, op := range r.Ops {
		if op.Worker != "harness" && !slices.Contains(workers, op.Worker) {
			workers = append(workers, op.Worker)
		}
		stamps = append(stamps, op.Call, op.Return)
	}
	if len(stamps) == 0 {
		return ""
	}
	slices.Sort(workers)
	axis := newTimeAxis(stamps)
	const (
		left   = 50
		lane   = 34
		top    = 62
		bottom = 36
	)
	width := left + axis.width + 20
	height := top + lane*len(workers) + bottom
	x := func(t int64) float64 { return left + axis.x(t) }
	y := func(w string) float64 { return float64(top + lane*slices.Index(workers, w)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%d">`, width, height)
	// The axis: cut gaps as grey bands, segment starts labelled.
	lastLabel := -1e9
	for _, sg := range axis.segs {
		if sg.gap {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#f3f3f3"/><text x="%.1f" y="%d" fill="#999">+%s</text>`,
				left+sg.x0, top-6, sg.x1-sg.x0, height-bottom-top+6, left+sg.x0+2, height-4, short(time.Duration(sg.t1-sg.t0)))
			continue
		}
		if left+sg.x0-lastLabel > 70 {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" fill="#666">%s</text>`,
				left+sg.x0, top-6, left+sg.x0, height-bottom, left+sg.x0+2, height-20, short(time.Duration(sg.t0)))
			lastLabel = left + sg.x0
		}
	}
	for _, w := range workers {
		fmt.Fprintf(&b, `<text x="4" y="%.0f">%s</text>`, y(w)+18, html.EscapeString(w))
	}
	// Holds: from the acquire's return to the end of the context.
	acq := map[int]Op{}
	for _, op := range r.Ops {
		if op.Kind == KindAcquire {
			acq[op.Grant] = op
		}
	}
	for _, op := range r.Ops {
		if op.Kind != KindEnd {
			continue
		}
		a, ok := acq[op.Grant]
		if !ok {
			continue
		}
		x0, x1 := x(a.Return), x(op.Return)
		stroke := "#4a7"
		if op.Outcome == OutcomeLost {
			stroke = "#d22"
		}
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="12" fill="#cde" stroke="%s"><title>t%d: %s</title></rect>`,
			x0, y(op.Worker)+4, max(x1-x0, 1), stroke, op.Token, html.EscapeString(op.Note))
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#88a"/>`, x(a.Call), y(op.Worker)+10, x0, y(op.Worker)+10)
		if x1-x0 > 24 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" fill="#246">t%d</text>`, x0+2, y(op.Worker)+14, op.Token)
		}
	}
	labels := make([]float64, 3) // right end of the last fault label in each row
	for i := range labels {
		labels[i] = -1e9
	}
	for _, op := range r.Ops {
		switch op.Kind {
		case KindRead, KindWrite:
			color, h := "#999", 6.0
			if op.Kind == KindWrite {
				h = 12
				switch {
				case op.Stale && op.Outcome == OutcomeOK:
					color = "#e00"
				case op.Outcome == OutcomeStale:
					color = "#f90"
				default:
					color = "#2a2"
				}
			}
			if op.Kind == KindRead {
				fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="2" height="%.0f" fill="%s"/>`, x(op.Call), y(op.Worker)+18, h, color)
				continue
			}
			stale := ""
			if op.Stale {
				stale = " (stale)"
			}
			fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="2" height="%.0f" fill="%s"><title>t%d: %d %s%s</title></rect>`,
				x(op.Call), y(op.Worker)+18, h, color, op.Token, op.Value, op.Outcome, stale)
		case KindFault:
			xf := x(op.Call)
			note := op.Note
			if op.Worker != "harness" {
				note = op.Worker + ": " + note
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d22" stroke-dasharray="4 3"><title>%s</title></line>`,
				xf, top-8, xf, height-bottom, html.EscapeString(note))
			for row := range labels {
				if xf > labels[row]+4 {
					fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#d22">%s</text>`, xf+2, 14+row*15, html.EscapeString(note))
					labels[row] = xf + 7*float64(len(note))
					break
				}
			}
		}
	}
	b.WriteString("</svg>")
	return b.String()
}

// timelineGap is the idle stretch beyond which a timeline cuts time.
const timelineGap = 100 * time.Millisecond

// timeAxis maps times to x positions: pxPerMs where events are, a fixed
// band for each cut gap.
type timeAxis struct {
	segs  []axisSeg
	width float64
}

type axisSeg struct {
	t0, t1 int64
	x0, x1 float64
	gap    bool
}

const (
	pxPerMs = 8.0
	gapPx   = 60.0
)

func newTimeAxis(stamps []int64) *timeAxis {
	s := slices.Clone(stamps)
	slices.Sort(s)
	s = slices.Compact(s)
	a := &timeAxis{}
	x := 0.0
	start := s[0]
	add := func(t0, t1 int64, gap bool) {
		w := gapPx
		if !gap {
			w = float64(t1-t0) / 1e6 * pxPerMs
		}
		a.segs = append(a.segs, axisSeg{t0: t0, t1: t1, x0: x, x1: x + w, gap: gap})
		x += w
	}
	for i := 1; i < len(s); i++ {
		if time.Duration(s[i]-s[i-1]) > timelineGap {
			add(start, s[i-1], false)
			add(s[i-1], s[i], true)
			start = s[i]
		}
	}
	add(start, s[len(s)-1], false)
	a.width = x
	return a
}

func (a *timeAxis) x(t int64) float64 {
	i, _ := slices.BinarySearchFunc(a.segs, t, func(sg axisSeg, t int64) int {
		switch {
		case sg.t1 < t:
			return -1
		case sg.t0 > t:
			return 1
		}
		return 0
	})
	if i >= len(a.segs) {
		return a.width
	}
	sg := a.segs[i]
	if sg.t1 == sg.t0 {
		return sg.x0
	}
	return sg.x0 + (sg.x1-sg.x0)*float64(t-sg.t0)/float64(sg.t1-sg.t0)
}

// short formats d with millisecond precision.
func short(d time.Duration) string {
	if d >= time.Second {
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}
