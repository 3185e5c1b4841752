package gateway

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/distlock/distlock/driver"
)

// errNothingRead is the error of a listing that could read no lock entry
// under its prefix (see listFor): it could tell nothing.
var errNothingRead = errors.New("could not read any lock entry under the prefix")

// listFor lists, from the lock service, the holders of the names with
// prefix that p may use. It asks the service only about those names (one
// listing per prefix of p that meets prefix), so that what it cannot
// read, which a partial listing names, is p's to see. A listing that
// could not read some entries (a file:// lock file that this process may
// not open: see filelock.ListError) lists the others, and says which
// could not be read in unread, as `distlock status` does; it fails with
// errNothingRead only when it could read none.
func (g *Gateway) listFor(ctx context.Context, prefix string, p *principal) (hs []driver.Holder, unread []string, err error) {
	read := false
	type entry struct {
		key    string
		token  uint64
		shared bool
	}
	seen := map[entry]bool{} // a key's exclusive holder, and each of its shared locks
	for _, q := range prefixesWithin(prefix, p.prefixes) {
		part, err := g.lister.List(ctx, q)
		files, listed, partial := unreadEntries(err)
		if err != nil && !partial {
			return nil, nil, err
		}
		read = read || err == nil || listed
		for _, h := range part {
			if e := (entry{h.Key, h.Token, h.Shared}); p.may(h.Key) && strings.HasPrefix(h.Key, prefix) && !seen[e] {
				seen[e] = true
				hs = append(hs, h)
			}
		}
		for _, f := range files {
			unread = append(unread, "cannot tell whether a lock is held: "+f.Error())
		}
	}
	if !read && len(unread) > 0 {
		return nil, unread, errNothingRead
	}
	slices.SortStableFunc(hs, func(a, b driver.Holder) int { return strings.Compare(a.Key, b.Key) })
	return hs, unread, nil
}

// prefixesWithin returns the prefixes to list for the names with prefix
// that start with one of allowed: for each allowed prefix that meets
// prefix, the longer of the two; none covered by another.
func prefixesWithin(prefix string, allowed []string) []string {
	var out []string
	for _, a := range allowed {
		switch {
		case strings.HasPrefix(prefix, a):
			out = append(out, prefix)
		case strings.HasPrefix(a, prefix):
			out = append(out, a)
		}
	}
	slices.Sort(out)
	kept := out[:0]
	for _, q := range out {
		if len(kept) == 0 || !strings.HasPrefix(q, kept[len(kept)-1]) {
			kept = append(kept, q)
		}
	}
	return kept
}

// holderIn returns the exclusive holder of name among hs, if any (not
// its shared locks).
func holderIn(hs []driver.Holder, name string) (driver.Holder, bool) {
	for _, h := range hs {
		if h.Key == name && !h.Shared {
			return h, true
		}
	}
	return driver.Holder{}, false
}
