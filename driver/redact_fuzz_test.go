package driver_test

import (
	"errors"
	"strings"
	"testing"
	"unicode"

	"github.com/distlock/distlock/driver"
)

// rot changes every ASCII letter and digit of s, and nothing else, so
// that a URL with rot(password) in place of password has the same shape.
func rot(s string) string {
	b := []byte(s) // bytes, not runes: invalid UTF-8 stays as it is
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			b[i] = 'a' + (c-'a'+13)%26
		case 'A' <= c && c <= 'Z':
			b[i] = 'A' + (c-'A'+13)%26
		case '0' <= c && c <= '9':
			b[i] = '0' + (c-'0'+5)%10
		}
	}
	return string(b)
}

// checkPrintable fails when shown could break a log line.
func checkPrintable(t *testing.T, shown string) {
	t.Helper()
	if strings.ContainsFunc(shown, func(r rune) bool { return !unicode.IsPrint(r) }) {
		t.Fatalf("Redact shows a control character: %q", shown)
	}
}

var seeds = []string{
	"redis://", "redis:", "rediss:", "redis+sentinel:", "etcd:", "etcds:", "redis+cluster://",
	"redis:/", "redis:///", "file://", "file:", "", "x", "redis://h:1/0?", "etcd://h1,h2/p?ca=x&",
	"redis://[::1]", "postgres://h/db?sslmode=x#", "a:b", "//", "redis://h/?password=",
}

// For any URL with user information (prefix USER:PASSWORD@ suffix, in any
// form, parsable or not), what Redact shows does not depend on the
// password: changing its letters and digits changes nothing shown.
func FuzzRedactUserinfo(f *testing.F) {
	for _, s := range seeds {
		f.Add(s, "u", "s3cret-PW", "h:6379/0")
		f.Add(s, "", "p/w?x#y@z", "h1,h2/x?ca=1")
		f.Add(s, "default", "PASS", "10.0.0.5:6380/0")
	}
	f.Fuzz(func(t *testing.T, prefix, user, password, suffix string) {
		raw := prefix + user + ":" + password + "@" + suffix
		shown := driver.Redact(raw)
		checkPrintable(t, shown)
		other := rot(password)
		if other == password {
			return
		}
		if again := driver.Redact(prefix + user + ":" + other + "@" + suffix); again != shown {
			t.Fatalf("Redact shows the password:\n%q -> %q\n%q -> %q", raw, shown, prefix+user+":"+other+"@"+suffix, again)
		}
		clean, ok := driver.WithoutSecrets(raw)
		clean2, ok2 := driver.WithoutSecrets(prefix + user + ":" + other + "@" + suffix)
		if clean != clean2 || ok != ok2 {
			t.Fatalf("WithoutSecrets keeps the password:\n%q -> %q %v\n%q -> %q %v", raw, clean, ok, prefix+user+":"+other+"@"+suffix, clean2, ok2)
		}
	})
}

// The value of a secret query parameter is never shown either.
func FuzzRedactQuery(f *testing.F) {
	for _, s := range seeds {
		f.Add(s+"h/0", "password", "s3cret")
		f.Add(s+"u:p@h?a=1", "Token", "t0k%41n")
		f.Add(s, "sslpassword", "x;y")
	}
	f.Fuzz(func(t *testing.T, prefix, name, value string) {
		if !driver.IsSecretParam(name) || strings.ContainsAny(value, "&;#@?") || strings.ContainsAny(name, "&;#@?=%") {
			return
		}
		sep := "?"
		if strings.Contains(prefix, "?") {
			sep = "&"
		}
		raw := prefix + sep + name + "=" + value
		shown := driver.Redact(raw)
		checkPrintable(t, shown)
		if other := rot(value); other != value {
			if again := driver.Redact(prefix + sep + name + "=" + other); again != shown {
				t.Fatalf("Redact shows the value of %s:\n%q -> %q\n%q", name, raw, shown, again)
			}
			clean, ok := driver.WithoutSecrets(raw)
			clean2, ok2 := driver.WithoutSecrets(prefix + sep + name + "=" + other)
			if clean != clean2 || ok != ok2 {
				t.Fatalf("WithoutSecrets keeps the value of %s:\n%q -> %q\n%q", name, raw, clean, clean2)
			}
		}
	})
}

// Scrub masks the password and the secret parameters of a URL in any
// message, as written and decoded, and a user name where it stands as a
// word, everywhere but within the URL as Redact shows it.
func FuzzScrub(f *testing.F) {
	f.Add("redis://u:", "p%2Fw", "@h/0?token=", "abc%26")
	f.Add("etcd:", "pw", "@h", "")
	f.Add("postgres://", "postgres", "@localhost/", "postgres")
	f.Add("redis://", "ro", "@h/0?x=", "error")
	f.Fuzz(func(t *testing.T, prefix, password, middle, token string) {
		raw := prefix + password + middle + token
		shown := driver.Redact(raw)
		msg := "open " + raw + ": " + password + " " + token + " (" + shown + ")"
		got := driver.Scrub(errors.New(msg), raw).Error()
		for _, s := range driver.Secrets(raw) {
			if strings.Trim(s, "x") != "" && exposed(got, shown, s, false) {
				t.Fatalf("Scrub(%q) for %q = %q: shows the secret %q", msg, raw, got, s)
			}
		}
		for _, s := range driver.UserSecrets(raw) {
			if strings.Trim(s, "x") != "" && exposed(got, shown, s, true) {
				t.Fatalf("Scrub(%q) for %q = %q: shows the user name %q", msg, raw, got, s)
			}
		}
	})
}

// exposed reports whether s stands in msg outside the occurrences of
// shown, and, if word, as a word.
func exposed(msg, shown, s string, word bool) bool {
	var spans [][2]int
	for i := 0; shown != ""; {
		j := strings.Index(msg[i:], shown)
		if j < 0 {
			break
		}
		spans = append(spans, [2]int{i + j, i + j + len(shown)})
		i += j + len(shown)
	}
	for i := 0; ; i++ {
		j := strings.Index(msg[i:], s)
		if j < 0 {
			return false
		}
		i += j
		inside := false
		for _, sp := range spans {
			inside = inside || sp[0] <= i && i+len(s) <= sp[1]
		}
		if !inside && !(word && driver.Glued(msg, i, i+len(s))) {
			return true
		}
	}
}

// ParseURL and Done never panic, and when ParseURL finds user
// information, Redact masks it or hides all but the scheme.
func FuzzParse(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
		f.Add(s + "u:PW@h")
	}
	f.Fuzz(func(t *testing.T, raw string) {
		scheme, _, _ := driver.Scheme(raw)
		u, err := driver.ParseURL(raw, driver.URLForm{Pkg: "x", Schemes: []string{scheme}})
		shown := driver.Redact(raw)
		checkPrintable(t, shown)
		if err == nil && u.HasUser && !strings.Contains(shown, driver.Mask+"@") && !strings.HasSuffix(shown, "(redacted)") {
			t.Fatalf("ParseURL(%q) finds user information, Redact shows %q", raw, shown)
		}
		if err == nil {
			u.Get("a")
			u.Duration("d")
			_ = u.Done()
		}
	})
}
