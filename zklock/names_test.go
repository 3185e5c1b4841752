package zklock_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/zklock"
)

var canonicalUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestUUIDIsCanonicalV4(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		u, err := zklock.NewUUID()
		if err != nil {
			t.Fatal(err)
		}
		if len(u) != 36 || !canonicalUUID.MatchString(u) {
			t.Fatalf("UUID %q is not in the canonical 36-character form of a version 4 UUID", u)
		}
		if seen[u] {
			t.Fatalf("UUID %q twice", u)
		}
		seen[u] = true
	}
}

func TestProtectedName(t *testing.T) {
	u, _ := zklock.NewUUID()
	name := zklock.NodePrefix(u, "lock-") + "0000000042"
	if !strings.HasPrefix(name, "_c_"+u+"-lock-") {
		t.Fatalf("node name %q", name)
	}
	if got, ok := zklock.ProtectedID(name); !ok || got != u {
		t.Errorf("ProtectedID(%q) = %q, %v", name, got, ok)
	}
	for _, bad := range []string{
		"lock-0000000001",
		"_c_" + strings.ReplaceAll(u, "-", "") + "-lock-0000000001", // go-zookeeper's 32 hex digits
		"_c_" + u + "-",
	} {
		if id, ok := zklock.ProtectedID(bad); ok {
			t.Errorf("ProtectedID(%q) = %q, want no protected name", bad, id)
		}
	}
}

// Nodes are ordered by their sequence, as Curator's recipes order the
// nodes of their own kind (InterProcessMutex's "-lock-", LeaderLatch's
// "-latch-"); locks and candidacies under one path are ordered together,
// by sequence, where each of Curator's recipes puts the other's behind
// its own. Readers and writers of Curator's read/write lock are ordered
// with them by sequence.
func TestSortsAsCurator(t *testing.T) {
	a, _ := zklock.NewUUID()
	b, _ := zklock.NewUUID()
	tests := []struct {
		name        string
		nodes, want []string
	}{{
		name: "locks",
		nodes: []string{
			"_c_" + a + "-lock-0000000012",
			"lock-0000000003", // Curator without protection
			"_c_" + b + "-lock-0000000001",
			"_c_" + b + "-lock-0000000010",
		},
		want: []string{
			"_c_" + b + "-lock-0000000001",
			"lock-0000000003",
			"_c_" + b + "-lock-0000000010",
			"_c_" + a + "-lock-0000000012",
		},
	}, {
		name: "candidacies",
		nodes: []string{
			"_c_" + a + "-latch-0000000012",
			"_c_" + b + "-latch-0000000001",
			"_c_" + b + "-latch-0000000010",
		},
		want: []string{
			"_c_" + b + "-latch-0000000001",
			"_c_" + b + "-latch-0000000010",
			"_c_" + a + "-latch-0000000012",
		},
	}, {
		name: "both",
		nodes: []string{
			"_c_" + a + "-latch-0000000012",
			"_c_" + a + "-lock-0000000011",
			"_c_" + b + "-latch-0000000001",
			"_c_" + b + "-lock-0000000002",
			"other", // neither: by its whole name, after every sequence
		},
		want: []string{
			"_c_" + b + "-latch-0000000001",
			"_c_" + b + "-lock-0000000002",
			"_c_" + a + "-lock-0000000011",
			"_c_" + a + "-latch-0000000012",
			"other",
		},
	}, {
		// Curator's InterProcessReadWriteLock names its nodes "__READ__"
		// and "__WRIT__", with no "-" before the sequence.
		name: "readers and writers",
		nodes: []string{
			"_c_" + a + "-__WRIT__0000000007",
			"_c_" + a + "-__READ__0000000003",
			"_c_" + b + "-lock-0000000005",
			"leases", // a semaphore's, at the same path
			"_c_" + b + "-__READ__0000000001",
			"_c_" + a + "-latch-0000000004",
			"_c_" + b + "-lock-latch-__READ__x", // no sequence: the part after the last name
			"_c_" + b + "-__WRIT__0000000002",
		},
		want: []string{
			"_c_" + b + "-__READ__0000000001",
			"_c_" + b + "-__WRIT__0000000002",
			"_c_" + a + "-__READ__0000000003",
			"_c_" + a + "-latch-0000000004",
			"_c_" + b + "-lock-0000000005",
			"_c_" + a + "-__WRIT__0000000007",
			"leases",
			"_c_" + b + "-lock-latch-__READ__x",
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := zklock.SortNodes(slices.Clone(tc.nodes)); !slices.Equal(got, tc.want) {
				t.Errorf("sorted\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestLockPath(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"reports/nightly", "/distlock/reports%2Fnightly"},
		{"100%", "/distlock/100%25"},
		{"..", "/distlock/%2E."},
		{".", "/distlock/%2E"},
		{"a.b", "/distlock/a.b"},
		{"zookeeper", "/distlock/zookeeper"},
		{"é", "/distlock/é"},
		{"\U0001F512", "/distlock/%F0%9F%94%92"},
		{"\uE000", "/distlock/%EE%80%80"},
	} {
		if got := zklock.LockPath(zklock.DefaultPrefix, tc.key); got != tc.want {
			t.Errorf("LockPath(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

// checkPath checks what ZooKeeper asks of a path: absolute, no empty, "."
// or ".." segment, and no character it refuses.
func checkPath(t *testing.T, key, p string) {
	t.Helper()
	if !strings.HasPrefix(p, zklock.DefaultPrefix+"/") || strings.Count(p, "/") != 2 {
		t.Fatalf("LockPath(%q) = %q: not one child of the prefix", key, p)
	}
	seg := p[len(zklock.DefaultPrefix)+1:]
	if seg == "" || seg[0] == '.' {
		t.Fatalf("LockPath(%q) = %q: empty segment or a leading dot", key, p)
	}
	for _, r := range seg {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || r >= 0xfff0 {
			t.Fatalf("LockPath(%q) = %q holds %U", key, p, r)
		}
	}
}

func FuzzLockPath(f *testing.F) {
	for _, k := range []string{"a", "a/b", "a%2Fb", "..", ".x", "%", "\U0001F512", "\uFFFD"} {
		f.Add(k, "b")
	}
	f.Fuzz(func(t *testing.T, k1, k2 string) {
		if distlock.ValidateKey(k1) != nil || distlock.ValidateKey(k2) != nil {
			return
		}
		p1, p2 := zklock.LockPath(zklock.DefaultPrefix, k1), zklock.LockPath(zklock.DefaultPrefix, k2)
		checkPath(t, k1, p1)
		if (p1 == p2) != (k1 == k2) {
			t.Fatalf("keys %q and %q: paths %q and %q", k1, k2, p1, p2)
		}
		back, ok := zklock.UnescapeKey(p1[len(zklock.DefaultPrefix)+1:])
		if !ok || back != k1 || !utf8.ValidString(back) {
			t.Fatalf("UnescapeKey(LockPath(%q)) = %q, %v", k1, back, ok)
		}
	})
}

func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  zklock.Option
	}{
		{"root prefix", zklock.WithPrefix("/")},
		{"relative prefix", zklock.WithPrefix("distlock")},
		{"trailing slash", zklock.WithPrefix("/distlock/")},
		{"dot segment", zklock.WithPrefix("/a/../b")},
		{"zookeeper's tree", zklock.WithPrefix("/zookeeper/locks")},
		{"short session", zklock.WithSessionTimeout(0)},
		{"request timeout", zklock.WithRequestTimeout(-1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := zklock.New([]string{"127.0.0.1:1"}, tc.opt)
			if err == nil {
				b.Close()
				t.Fatal("accepted")
			}
			if !strings.HasPrefix(err.Error(), "distlock: invalid option: zklock: ") {
				t.Errorf("error %q", err)
			}
		})
	}
	if _, err := zklock.New(nil); err == nil {
		t.Error("New with no server accepted")
	}
}
