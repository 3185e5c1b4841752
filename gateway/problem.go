package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// Problem types: the stable "type" of each kind of error the gateway
// answers, as application/problem+json (RFC 9457).
const (
	ProblemBadRequest       = "urn:distlock:problem:bad-request"        // 400: malformed JSON, unknown field, bad parameter
	ProblemBadName          = "urn:distlock:problem:bad-name"           // 400: not a valid lock name
	ProblemBadTTL           = "urn:distlock:problem:bad-ttl"            // 400: session TTL out of range
	ProblemUnauthorized     = "urn:distlock:problem:unauthorized"       // 401: no or unknown bearer token
	ProblemForbidden        = "urn:distlock:problem:forbidden"          // 403: the token may not use this name, or may not force a release; a web page of another origin
	ProblemNotFound         = "urn:distlock:problem:not-found"          // 404: no such route
	ProblemSessionNotFound  = "urn:distlock:problem:session-not-found"  // 404: the session ended, or never existed here
	ProblemMethodNotAllowed = "urn:distlock:problem:method-not-allowed" // 405
	ProblemNotAcquired      = "urn:distlock:problem:not-acquired"       // 409: held by another when the wait ended
	ProblemNotHeld          = "urn:distlock:problem:not-held"           // 409: the session does not hold the lock (or the term) with this token
	ProblemLockLost         = "urn:distlock:problem:lock-lost"          // 409: the lock (or the term) had been lost before the release (or the resignation)
	ProblemNotElected       = "urn:distlock:problem:not-elected"        // 409: another candidate led when the campaign's wait ended
	ProblemNoLeader         = "urn:distlock:problem:no-leader"          // 404: the election has no leader
	ProblemLimitMismatch    = "urn:distlock:problem:limit-mismatch"     // 409: the semaphore stores another limit than the permit named
	ProblemTooLarge         = "urn:distlock:problem:too-large"          // 413: body over MaxBody
	ProblemUnsupportedMedia = "urn:distlock:problem:unsupported-media"  // 415: body not application/json
	ProblemTooMany          = "urn:distlock:problem:too-many"           // 429: a limit (or a token's share) of sessions, waits or streams: try again later
	ProblemSessionLimit     = "urn:distlock:problem:session-limit"      // 429: the session holds or waits for WithMaxLocks locks: not worth a retry until it releases one
	ProblemInternal         = "urn:distlock:problem:internal"           // 500
	ProblemUnsupported      = "urn:distlock:problem:unsupported"        // 501: the lock service cannot answer this
	ProblemUnavailable      = "urn:distlock:problem:unavailable"        // 503: the lock service failed, or the gateway is closing
)

// problem is an error answer. Holder is set on not-acquired when the lock
// service can tell who holds the lock, Leader on not-elected, Limit
// (WithMaxLocks) on session-limit, and the tokens on a forced release of
// readers that failed in part.
type problem struct {
	Type   string      `json:"type"`
	Title  string      `json:"title"`
	Status int         `json:"status"`
	Detail string      `json:"detail,omitempty"`
	Holder *holder     `json:"holder,omitempty"`
	Leader *leaderJSON `json:"leader,omitempty"`
	Limit  int         `json:"limit,omitempty"`
	// ReleasedTokens and FailedTokens: on a forced release of a lock's
	// readers that failed in part, the tokens released and those whose
	// release failed.
	ReleasedTokens *[]string `json:"released_tokens,omitempty"`
	FailedTokens   []string  `json:"failed_tokens,omitempty"`

	retryAfter int // seconds, for 429 and 503
}

// titles are the fixed titles of the problem types.
var titles = map[string]string{
	ProblemBadRequest:       "Bad request",
	ProblemBadName:          "Bad lock name",
	ProblemBadTTL:           "Bad TTL",
	ProblemUnauthorized:     "Unauthorized",
	ProblemForbidden:        "Forbidden",
	ProblemNotFound:         "Not found",
	ProblemSessionNotFound:  "Session not found",
	ProblemMethodNotAllowed: "Method not allowed",
	ProblemNotAcquired:      "Not acquired",
	ProblemNotHeld:          "Lock not held",
	ProblemLockLost:         "Lock lost",
	ProblemNotElected:       "Not elected",
	ProblemNoLeader:         "No leader",
	ProblemLimitMismatch:    "Semaphore limit mismatch",
	ProblemTooLarge:         "Request too large",
	ProblemUnsupportedMedia: "Unsupported media type",
	ProblemTooMany:          "Too many",
	ProblemSessionLimit:     "Too many locks in the session",
	ProblemInternal:         "Internal error",
	ProblemUnsupported:      "Not supported by the lock service",
	ProblemUnavailable:      "Unavailable",
}

func newProblem(status int, typ, detail string) *problem {
	return &problem{Type: typ, Title: titles[typ], Status: status, Detail: detail}
}

func (p *problem) Error() string { return p.Title + ": " + p.Detail }

// writeProblem answers p.
func writeProblem(w http.ResponseWriter, p *problem) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="distlock"`)
	}
	if p.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	w.WriteHeader(p.Status)
	writeEncoded(w, p)
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	writeEncoded(w, v)
}

// writeEncoded writes v as JSON and a newline, with no raw control
// character (see escapeControls).
func writeEncoded(w http.ResponseWriter, v any) {
	data, _ := json.Marshal(v)
	w.Write(append(escapeControls(data), '\n'))
}

// escapeControls escapes, in JSON text, the control characters that
// encoding/json leaves raw: DEL and the C1 controls, which a terminal
// showing the answer may act on (U+009B starts an escape sequence). An
// owner or a leader's value read from the lock service may hold them,
// written by another client of it. They can occur only within strings,
// where \uXXXX is the same character. (json.Marshal writes valid UTF-8.)
func escapeControls(data []byte) []byte {
	if !bytes.ContainsFunc(data, rawControl) {
		return data
	}
	out := make([]byte, 0, len(data)+16)
	for len(data) > 0 {
		r, n := utf8.DecodeRune(data)
		if rawControl(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, data[:n]...)
		}
		data = data[n:]
	}
	return out
}

func rawControl(r rune) bool { return r == 0x7f || (r >= 0x80 && r < 0xa0) }
