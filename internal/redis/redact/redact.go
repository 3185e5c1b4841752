// Package redact keeps a secret that a Redis command carries out of what
// logs and traces show of the command.
//
// A Secret is a command argument (a script's key or argument) that holds
// a secret, such as a grant's secret that lets whoever knows it release
// the grant. go-redis writes it to the server as its bytes, through
// encoding.BinaryMarshaler. Everything else that renders it shows the
// fixed text "[secret]": fmt with any verb (so cmd.String, which prints
// such an argument with fmt.Sprint), encoding/json (so a hook that
// encodes cmd.Args() as JSON, as slog.JSONHandler and zap do),
// encoding.TextMarshaler (slog.TextHandler, encoding/xml), slog.LogValuer
// and encoding/gob.
//
// It does not hide the bytes from MarshalBinary, which is how go-redis
// writes them, nor from code that reads the unexported field by reflection
// (a pretty-printer of structs) or that decodes the command's wire form.
// The server itself, its slow log, MONITOR, its append-only file and its
// replication stream see the bytes.
package redact

import (
	"fmt"
	"io"
	"log/slog"
)

// shown is what every rendering of a Secret but MarshalBinary shows.
const shown = "[secret]"

// Secret is an argument of a Redis command that holds a secret. go-redis
// writes it as its bytes; fmt, encoding/json, encoding.TextMarshaler,
// slog and encoding/gob show "[secret]". Its zero value writes no bytes.
//
// Pass a *Secret to go-redis (the address of a Secret that lives as long
// as the commands that carry it): converting a pointer to an interface
// value allocates nothing, and MarshalBinary allocates nothing either. A
// Secret is safe for concurrent use once made.
type Secret struct {
	b []byte
}

// Bytes returns a Secret that writes b. b must not change afterwards: the
// Secret keeps it, not a copy.
func Bytes(b []byte) Secret { return Secret{b: b} }

// MarshalBinary returns the secret's bytes, as go-redis writes them to
// the server (encoding.BinaryMarshaler). The caller must not change them.
func (s Secret) MarshalBinary() ([]byte, error) { return s.b, nil }

// String returns "[secret]" (fmt.Stringer).
func (s Secret) String() string { return shown }

// GoString returns "[secret]" (fmt.GoStringer).
func (s Secret) GoString() string { return shown }

// Format writes "[secret]" for every verb (fmt.Formatter), quoted for %q, so
// that no verb prints the bytes.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		_, _ = io.WriteString(f, `"`+shown+`"`)
		return
	}
	_, _ = io.WriteString(f, shown)
}

// MarshalJSON returns "[secret]" as a JSON string (json.Marshaler).
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + shown + `"`), nil }

// MarshalText returns "[secret]" (encoding.TextMarshaler).
func (s Secret) MarshalText() ([]byte, error) { return []byte(shown), nil }

// LogValue returns "[secret]" as a string (slog.LogValuer).
func (s Secret) LogValue() slog.Value { return slog.StringValue(shown) }

// GobEncode returns "[secret]" (gob.GobEncoder), which encoding/gob prefers to
// MarshalBinary.
func (s Secret) GobEncode() ([]byte, error) { return []byte(shown), nil }
