package visible_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/internal/visible"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"jobs/report", "jobs/report"},
		{"ключ/数据 😀", "ключ/数据 😀"},
		{"jobs/\u202egnp.exe", `"jobs/\u202egnp.exe"`},                                   // RIGHT-TO-LEFT OVERRIDE
		{"a\u202ab\u202bc\u202cd\u202de", `"a\u202ab\u202bc\u202cd\u202de"`},             // embeddings, pop
		{"\u2066x\u2067y\u2068z\u2069", `"\u2066x\u2067y\u2068z\u2069"`},                 // isolates
		{"a\u200eb\u200fc\u061cd", `"a\u200eb\u200fc\u061cd"`},                           // marks
		{"a\u200bb\u200cc\u200dd\u2060e\ufeff", `"a\u200bb\u200cc\u200dd\u2060e\ufeff"`}, // zero-width
		{"a\u2028b\u00a0c", `"a\u2028b\u00a0c"`},                                         // separators
		{"a\x1b[2Jb\x7fc\u0085", `"a\x1b[2Jb\x7fc\u0085"`},                               // controls
		{"a\xffb", `"a\xffb"`},                                                           // not UTF-8
		{`"quoted"`, `"\"quoted\""`},
		{"tag\U000e0041", `"tag\U000e0041"`},
	} {
		if got := visible.Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%+q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// JSON escapes every hidden character of the JSON data, whatever it is,
// and the data decodes to the same value.
func TestJSONEscapesEveryHiddenCharacter(t *testing.T) {
	var all []rune
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if utf8.ValidRune(r) {
			all = append(all, r)
		}
	}
	in := map[string]any{"key": string(all), "owner": "eve\u202e", "n": 1}
	data, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	out := visible.JSON(data)
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRune(out[i:])
		if visible.Hidden(r) && r != '\n' && r != utf8.RuneError {
			t.Fatalf("%U at byte %d of the output", r, i)
		}
		i += n
	}
	var back map[string]any
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if back["key"] != in["key"] || back["owner"] != in["owner"] {
		t.Error("the escaped JSON decodes to another value")
	}
	if plain := []byte(`{"key":"jobs/x"}`); !bytes.Equal(visible.JSON(plain), plain) {
		t.Error("JSON changed data without a hidden character")
	}
}
