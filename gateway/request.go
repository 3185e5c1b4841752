package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

// MaxBody is the largest request body the gateway reads, in bytes: every
// request body is a small JSON object.
const MaxBody = 8 << 10

// bodyTimeout bounds the reading of a request body, so that a client that
// sends its body slowly cannot hold a handler.
const bodyTimeout = 10 * time.Second // or twice WithHeaderTimeout, if less

// maxQuoted is how much of a name an error quotes.
const maxQuoted = 64

// quoteName quotes name for an error, shortened.
func quoteName(name string) string {
	if len(name) > maxQuoted {
		return strconv.Quote(name[:maxQuoted]) + "..."
	}
	return strconv.Quote(name)
}

// lockName returns the lock name of r's path, checked.
func lockName(r *http.Request) (string, *problem) {
	name := r.PathValue("name")
	if err := distlock.ValidateKey(name); err != nil {
		return "", newProblem(http.StatusBadRequest, ProblemBadName,
			strings.TrimPrefix(err.Error(), "distlock: "))
	}
	return name, nil
}

// rawDotSegment reports whether the escaped path has a "." or ".."
// segment, which the HTTP router would resolve to another path.
func rawDotSegment(escaped string) bool {
	for _, seg := range strings.Split(escaped, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// readBody reads r's whole body, at most MaxBody bytes within timeout,
// into memory, so that no handler reads from the network and the server
// never waits for the rest of a body after an answer (a client sending
// its body slowly would hold the connection). On error the connection is
// closed after the answer.
func readBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) *problem {
	if r.ContentLength == 0 {
		return nil
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(timeout))
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		w.Header().Set("Connection", "close")
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return newProblem(http.StatusRequestEntityTooLarge, ProblemTooLarge, fmt.Sprintf("the body is over %d bytes", MaxBody))
		}
		return newProblem(http.StatusBadRequest, ProblemBadRequest, "the body could not be read in time")
	}
	rc.SetReadDeadline(time.Time{}) // a long-poll may follow: the server watches for the client's going away
	r.Body = io.NopCloser(bytes.NewReader(data))
	return nil
}

// readJSON decodes r's body (read by readBody), a single JSON object with
// only known fields, into v.
func readJSON(r *http.Request, v any) *problem {
	// The media type is required, not only checked when present: it is
	// also what keeps a web page from posting to a gateway on the
	// loopback interface. A page may send a body without a Content-Type
	// (fetch with mode no-cors and a Blob, navigator.sendBeacon) or as a
	// form, but application/json needs a CORS preflight, which the
	// gateway never grants.
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return newProblem(http.StatusUnsupportedMediaType, ProblemUnsupportedMedia,
			"the body must be JSON, sent with Content-Type: application/json")
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return newProblem(http.StatusBadRequest, ProblemBadRequest, "the body could not be read")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return newProblem(http.StatusBadRequest, ProblemBadRequest, "malformed JSON body: "+jsonError(err))
	}
	if dec.More() {
		return newProblem(http.StatusBadRequest, ProblemBadRequest, "malformed JSON body: more than one value")
	}
	return nullField(data)
}

// nullField refuses a body with a field set to null. No field of the
// gateway's request bodies gives null a meaning, and Go's decoding would
// take it as the field left out: "shared": null as an exclusive lock,
// "force": null as a release by the holder, "slots": null as a semaphore
// without slots. A field is given a value or left out.
func nullField(data []byte) *problem {
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) != nil {
		return nil // a JSON null body: decoded as no field set, as an empty object
	}
	var nulls []string
	for k, v := range fields {
		if string(bytes.TrimSpace(v)) == "null" {
			nulls = append(nulls, k)
		}
	}
	if len(nulls) == 0 {
		return nil
	}
	slices.Sort(nulls)
	k := nulls[0]
	if len(k) > maxQuoted {
		k = k[:maxQuoted] + "..."
	}
	return newProblem(http.StatusBadRequest, ProblemBadRequest,
		fmt.Sprintf("field %q is null: give it a value, or leave it out for its default", k))
}

// jsonError describes a decoding error without quoting the input.
func jsonError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "empty"
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be %s", te.Field, te.Type)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.TrimPrefix(err.Error(), "json: unknown field ")
		if len(f) > maxQuoted {
			f = f[:maxQuoted] + "..."
		}
		return "unknown field " + f
	}
	return "not a JSON object"
}

// durationSyntax matches what time.ParseDuration reads, whatever the
// size: a string that matches and that it refuses is out of range.
var durationSyntax = regexp.MustCompile(`^[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$`)

// parseDuration reads a duration such as "1m30s". One beyond the range
// of time.Duration (about 292 years either way) is clamped to its bound,
// so that it is answered as above (or below) the bound the caller checks,
// not as malformed.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	switch {
	case err == nil:
		return d, nil
	case !durationSyntax.MatchString(s):
		return 0, err
	case strings.HasPrefix(s, "-"):
		return math.MinInt64, nil
	}
	return math.MaxInt64, nil
}

// seconds is n seconds as a duration, clamped to the range of
// time.Duration as parseDuration does. n must not be NaN.
func seconds(n float64) time.Duration {
	switch ns := n * float64(time.Second); {
	case ns >= math.MaxInt64:
		return math.MaxInt64
	case ns <= math.MinInt64:
		return math.MinInt64
	default:
		return time.Duration(ns)
	}
}

// waitParam reads the ?wait= duration of r (default 0), capped at max.
func waitParam(r *http.Request, max time.Duration) (time.Duration, *problem) {
	s := r.URL.Query().Get("wait")
	if s == "" {
		return 0, nil
	}
	d, err := parseDuration(s)
	if err != nil {
		// A bare number is seconds, as in Consul's blocking queries; one
		// too large for a float64 is ±Inf with ErrRange.
		n, nerr := strconv.ParseFloat(s, 64)
		if (nerr != nil && !errors.Is(nerr, strconv.ErrRange)) || n != n {
			return 0, newProblem(http.StatusBadRequest, ProblemBadRequest, "wait must be a duration such as 10s, or a number of seconds")
		}
		d = seconds(n)
	}
	if d < 0 {
		return 0, newProblem(http.StatusBadRequest, ProblemBadRequest, "wait must not be negative")
	}
	return min(d, max), nil
}

// parseUint64 reads the decimal uint64 s of the parameter what: one over
// 64 bits is answered as out of range, anything else that is not a
// decimal integer as "what must be how".
func parseUint64(what, s, how string) (uint64, *problem) {
	n, err := strconv.ParseUint(s, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, newProblem(http.StatusBadRequest, ProblemBadRequest,
			fmt.Sprintf("%s %s is out of range: the largest is %d", what, s, uint64(math.MaxUint64)))
	case err != nil:
		return 0, newProblem(http.StatusBadRequest, ProblemBadRequest, what+" must be "+how)
	}
	return n, nil
}

// parseToken reads a fencing token, a decimal string.
func parseToken(s string) (uint64, *problem) {
	const how = "a positive decimal integer in a string"
	t, pr := parseUint64("token", s, how)
	if pr == nil && t == 0 {
		pr = newProblem(http.StatusBadRequest, ProblemBadRequest, "token must be "+how)
	}
	return t, pr
}

// ms is d in whole milliseconds, rounded down and never negative.
func ms(d time.Duration) int64 { return max(0, d.Milliseconds()) }

// loopbackHost reports whether the Host of a request names the loopback
// interface: "localhost" or a loopback IP address, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
