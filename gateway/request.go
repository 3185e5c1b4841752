package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
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
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return newProblem(http.StatusBadRequest, ProblemBadRequest, "malformed JSON body: "+jsonError(err))
	}
	if dec.More() {
		return newProblem(http.StatusBadRequest, ProblemBadRequest, "malformed JSON body: more than one value")
	}
	return nil
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

// waitParam reads the ?wait= duration of r (default 0), capped at max.
func waitParam(r *http.Request, max time.Duration) (time.Duration, *problem) {
	s := r.URL.Query().Get("wait")
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		// A bare number is seconds, as in Consul's blocking queries.
		n, nerr := strconv.ParseFloat(s, 64)
		if nerr != nil || n != n {
			return 0, newProblem(http.StatusBadRequest, ProblemBadRequest, "wait must be a duration such as 10s")
		}
		d = time.Duration(min(n, max.Seconds()+1) * float64(time.Second))
	}
	if d < 0 {
		return 0, newProblem(http.StatusBadRequest, ProblemBadRequest, "wait must not be negative")
	}
	return min(d, max), nil
}

// parseToken reads a fencing token, a decimal string.
func parseToken(s string) (uint64, *problem) {
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil || t == 0 {
		return 0, newProblem(http.StatusBadRequest, ProblemBadRequest, "token must be a positive decimal integer in a string")
	}
	return t, nil
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
