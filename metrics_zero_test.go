package distlock_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/metrictest"
	"github.com/distlock/distlock/memlock"
)

// instrumentRow is a row of README.md's instrument table:
// | `name` | kind | unit | attributes |, the attributes as "`key`: `v1`, `v2`".
var instrumentRow = regexp.MustCompile("(?m)^\\| `(distlock\\.[a-z.]+)` \\| ([a-z -]+) \\| [^|]* \\|\\s*([^|]*?)\\s*\\|$")

var backtick = regexp.MustCompile("`([^`]+)`")

// Every counter exists from a Client's (or a guard's) creation at 0, for
// each attribute value README.md lists, so that an alert on one sees 0
// rather than no data. Histograms are the exception the package doc
// states: a measurement is an event. The package doc lists the same
// instruments as the README.
func TestMetricsStartAtZero(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	mp := metrictest.NewProvider()
	newClient(t, memlock.New(), distlock.WithMeterProvider(mp))
	fence.NewRegister(fence.WithMeterProvider(mp))
	got := mp.Counts()

	rows := instrumentRow.FindAllStringSubmatch(string(readme), -1)
	if len(rows) < 8 {
		t.Fatalf("README.md's instrument table has %d rows, want 8 or more", len(rows))
	}
	for _, row := range rows {
		name, kind, attrs := row[1], row[2], row[3]
		if !strings.Contains(string(doc), name) {
			t.Errorf("%s is in README.md's table, not in the package doc", name)
		}
		if kind == "histogram" {
			continue
		}
		key, values := "", []string(nil)
		if k, v, ok := strings.Cut(attrs, ":"); ok {
			key = strings.Trim(k, " `")
			for _, m := range backtick.FindAllStringSubmatch(v, -1) {
				values = append(values, m[1])
			}
		}
		var want []string
		switch {
		case name == "distlock.fence.rejections":
			for _, guard := range values {
				if guard != "fence.Register" {
					fence.NewCounter(guard, fence.WithMeterProvider(mp))
				}
				want = append(want, name+"{"+key+"="+guard+"}")
			}
			got = mp.Counts()
		case key == "":
			want = []string{name + "{distlock.backend=memlock}"}
		default:
			for _, v := range values {
				want = append(want, name+"{distlock.backend=memlock,"+key+"="+v+"}")
			}
		}
		for _, w := range want {
			if n, ok := got[w]; !ok || n != 0 {
				t.Errorf("%s = %d (listed: %v) before any event, want 0", w, n, ok)
			}
		}
	}
}
