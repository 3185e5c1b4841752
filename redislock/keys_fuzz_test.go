package redislock

import (
	"strings"
	"testing"

	"github.com/distlock/distlock"
)

// Every Redis key of a lock carries the lock's hash tag whatever the user
// key holds, the tag decodes back to the key (so distinct keys never share
// Redis keys), and the lock key decodes as List reads it.
func FuzzHashTag(f *testing.F) {
	for _, k := range []string{"a", "{", "}", "{}", "}{", "a{b}c", "%7D", "%", "%%7B", "x}y{z", "ключ/🔒"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if distlock.ValidateKey(key) != nil {
			t.Skip("not a valid key: refused before it reaches the backend")
		}
		tag := HashTag(key)
		inner := tag[1 : len(tag)-1]
		if strings.ContainsAny(inner, "{}") {
			t.Fatalf("HashTag(%q) = %q: a brace inside the tag", key, tag)
		}
		if got := tagUnescaper.Replace(inner); got != key {
			t.Fatalf("HashTag(%q) decodes to %q", key, got)
		}
		b := &Backend{cfg: config{prefix: DefaultPrefix}}
		k := b.keysFor(key, []byte("s"))
		base := DefaultPrefix + tag
		want := []string{base + ":lock", base + ":token", base + ":queue", base + ":alive", base + ":released", base + ":released:s", base + ":last"}
		if got := []string{k.lock, k.token, k.queue, k.alive, k.channel, reveal(k.tomb), k.last}; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("keysFor(%q) = %q, want %q", key, got, want)
		}
		if held, secret := reveal(k.held), reveal(k.secret); held != "s|" || secret != "s" {
			t.Fatalf("keysFor(%q, \"s\"): held %q, secret %q; want \"s|\", \"s\"", key, held, secret)
		}
		for _, rk := range want {
			if keyTag(rk) != inner {
				t.Fatalf("key %q of %q hashes by %q, want %q", rk, key, keyTag(rk), inner)
			}
		}
		if got, ok := decodeLockKey(DefaultPrefix, k.lock); !ok || got != key {
			t.Fatalf("decodeLockKey(%q) = %q, %v; want %q", k.lock, got, ok, key)
		}
	})
}
