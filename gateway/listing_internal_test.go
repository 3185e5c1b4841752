package gateway

import (
	"slices"
	"testing"
)

// A listing asks the lock service only about the names the caller may
// use: for each of its prefixes that meets the one asked for, the longer
// of the two, and none that another covers.
func TestPrefixesWithin(t *testing.T) {
	for _, c := range []struct {
		prefix  string
		allowed []string
		want    []string
	}{
		{"", []string{""}, []string{""}},
		{"jobs/", []string{""}, []string{"jobs/"}},
		{"", []string{"ci/", "build/"}, []string{"build/", "ci/"}},
		{"c", []string{"ci/", "build/"}, []string{"ci/"}},
		{"ci/x", []string{"ci/", "build/"}, []string{"ci/x"}},
		{"prod/", []string{"ci/", "build/"}, nil},
		{"", []string{"ci/", "ci/x/", "cj"}, []string{"ci/", "cj"}},
		{"ci/x/y", []string{"ci/", "ci/x/"}, []string{"ci/x/y"}},
	} {
		if got := prefixesWithin(c.prefix, c.allowed); !slices.Equal(got, c.want) {
			t.Errorf("prefixesWithin(%q, %q) = %q, want %q", c.prefix, c.allowed, got, c.want)
		}
	}
}
