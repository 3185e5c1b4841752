// Package visible shows text that anyone with access to a lock service
// wrote (lock names, owners) on a terminal or a page without letting it
// deceive the reader: a character that does not print is shown as an
// escape instead.
//
// The rule is Hidden, and the same as strconv.Quote's, so that the
// messages that quote a name (%q) agree with a listing: every character
// prints but the controls, the format characters (among them the
// bidirectional controls and isolates, U+202A to U+202E and U+2066 to
// U+2069, which turn the text after them around, and the zero-width
// space, joiners and no-break space), the separators other than the
// space, private use, surrogates and unassigned code points. The
// gateway's dashboard applies the same rule in its script, which a test
// holds to this one.
package visible

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Hidden reports whether r is shown as an escape: it does not print
// (unicode.IsPrint), or it is utf8.RuneError, which stands for bytes
// that are not UTF-8.
func Hidden(r rune) bool { return !unicode.IsPrint(r) || r == utf8.RuneError }

// Quote returns s as it is if no character of it is Hidden (and it does
// not begin with a double quote, which would make it look quoted), else
// Go-quoted (strconv.Quote): the hidden characters, and bytes that are
// not UTF-8, as escapes.
func Quote(s string) string {
	if strings.HasPrefix(s, `"`) || strings.IndexFunc(s, Hidden) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// JSON returns the encoded JSON data with the Hidden characters of its
// strings escaped as \uXXXX (a pair of them past U+FFFF), which decodes
// to the same value. encoding/json escapes the controls below U+0020,
// but not DEL, the C1 controls or the format characters. U+FFFD, which
// encoding/json puts in place of bytes that are not UTF-8, is left as
// it is: in JSON it is a character like any other. Outside its strings
// JSON data holds nothing that is hidden but the white space between
// values, which is left as it is.
func JSON(data []byte) []byte {
	i := indexJSONHidden(data)
	if i < 0 {
		return data
	}
	out := make([]byte, 0, len(data)+16)
	for i >= 0 {
		r, n := utf8.DecodeRune(data[i:])
		out = append(out, data[:i]...)
		if r > 0xffff {
			r1, r2 := utf16.EncodeRune(r)
			out = appendU(appendU(out, r1), r2)
		} else {
			out = appendU(out, r)
		}
		data = data[i+n:]
		i = indexJSONHidden(data)
	}
	return append(out, data...)
}

// indexJSONHidden is the index of the first character of data that JSON
// escapes, or -1.
func indexJSONHidden(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == 0x7f || (r >= 0x80 && Hidden(r) && !(r == utf8.RuneError && n == 3)) {
			return i
		}
		i += n
	}
	return -1
}

func appendU(b []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	return append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
}
