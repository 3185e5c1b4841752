package redislock

import (
	"testing"
)

// rot changes the letters and digits of s within their classes, keeping
// percent-escapes valid or invalid as they were.
func rot(s string) string {
	b := []byte(s) // bytes, not runes: invalid UTF-8 stays as it is
	for i, c := range b {
		switch {
		case '0' <= c && c <= '9':
			b[i] = '0' + (c-'0'+5)%10
		case 'a' <= c && c <= 'f':
			b[i] = 'a' + (c-'a'+3)%6
		case 'A' <= c && c <= 'F':
			b[i] = 'A' + (c-'A'+3)%6
		case 'g' <= c && c <= 'z':
			b[i] = 'g' + (c-'g'+10)%20
		case 'G' <= c && c <= 'Z':
			b[i] = 'G' + (c-'G'+10)%20
		}
	}
	return string(b)
}

// parseURL never panics, and its errors do not depend on the password:
// with its letters and digits changed, the error reads the same.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redis:", "rediss:", "redis+cluster:", "rediss+cluster:", "redis+sentinel:",
		"redis://", "redis+cluster://", "redis+sentinel://", "redis:/", "redis:///", ""} {
		f.Add(s, "default", "PASS", "10.0.0.5:6380/0")
		f.Add(s, "", "p/w@x", "h1,[::1]:7000?dial_timeout=1s&prefix=a")
		f.Add(s, "u", "pw", "s1,s2/main/1?fair=true")
	}
	f.Fuzz(func(t *testing.T, prefix, user, password, suffix string) {
		raw := prefix + user + ":" + password + "@" + suffix
		_, err := parseURL(raw)
		_, err2 := parseURL(prefix + user + ":" + rot(password) + "@" + suffix)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("the password decides whether %q parses: %v / %v", raw, err, err2)
		}
		if err != nil && err.Error() != err2.Error() {
			t.Fatalf("the error shows the password:\n%q: %v\n%q: %v", raw, err, rot(password), err2)
		}
		// Any string at all: no panic.
		parseURL(prefix + suffix)
	})
}
