package torture

import (
	"fmt"
	"strings"
)

// Table renders results as a Markdown table.
func Table(results []*Result) string {
	var b strings.Builder
	b.WriteString(tableHeader)
	for _, r := range results {
		b.WriteString(tableRow(r) + "\n")
	}
	return b.String()
}

// tableHeader is the head of a Table.
const tableHeader = "| backend | scenario | store | expect | rounds (fault effective) | histories | verdicts mutex/tokens/register | grants | violations | overlaps | stale attempted/refused/accepted | lost updates | token regressions | orphans | detection p50/p99 | outcome |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"

// tableRow is r's row of a Table, without its newline.
func tableRow(r *Result) string {
	det := "-"
	if len(r.Detection) > 0 {
		det = fmt.Sprintf("%v / %v", Percentile(r.Detection, 50).Round(ms), Percentile(r.Detection, 99).Round(ms))
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %d (%d) | %d | %s | %d | %d | %d | %d/%d/%d | %d | %d | %d | %s | %s |",
		r.Backend, r.id(), r.Mode, r.Expect, r.Rounds, r.Effective, r.Histories, r.verdicts(), r.Grants, r.Violations(), r.Overlaps,
		r.StaleAttempted, r.StaleRefused, r.StaleAccepted, r.LostUpdates, r.TokenRegressions, r.Orphans, det, r.Outcome())
}

const ms = 1e6

func (r *Result) id() string {
	if r.Variant == "" {
		return r.Scenario
	}
	return r.Scenario + "/" + r.Variant
}

func (r *Result) verdicts() string {
	var s []string
	for _, k := range modelKinds {
		v := string(r.Verdicts[string(k)])
		if v == "" {
			v = "-"
		}
		s = append(s, v)
	}
	return strings.Join(s, "/")
}
