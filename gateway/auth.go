package gateway

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
)

// ErrTokens is matched by the errors of ReadTokens and ParseTokens.
var ErrTokens = errors.New("gateway: bad token file")

// Tokens are the bearer tokens a gateway accepts. The zero value (and nil)
// accepts none.
type Tokens struct {
	list []token
}

type token struct {
	name     string
	digest   [sha256.Size]byte // of the secret: compared in constant time, never shown
	prefixes []string
	admin    bool

	// Its share of the gateway's limits; 0: an even part (see share).
	maxSessions, maxWaiting, maxStreams int
}

// tokenFile is the JSON form of a token file:
//
//	{"tokens": [
//	  {"name": "ci", "token": "SECRET", "prefixes": ["jobs/", "deploy/"], "max_sessions": 500},
//	  {"name": "ops", "token": "SECRET2", "prefixes": [""], "admin": true}
//	]}
//
// An empty prefix allows every name.
type tokenFile struct {
	Tokens []struct {
		Name        string   `json:"name"`
		Token       string   `json:"token"`
		Prefixes    []string `json:"prefixes"`
		Admin       bool     `json:"admin"`
		MaxSessions int      `json:"max_sessions"`
		MaxWaiting  int      `json:"max_waiting"`
		MaxStreams  int      `json:"max_streams"`
	} `json:"tokens"`
}

// minSecret is the shortest secret accepted: guessing 16 characters drawn
// by a password generator is out of reach.
const minSecret = 16

// ReadTokens reads a token file (see ParseTokens). It refuses a file
// that other users of the host may read or write, or that its group may
// write (its group may read it), or that belongs to a user other than
// this process's and root, who may change it: they could read an admin
// secret or add a token of their own. As ssh does with such a private
// key, it refuses rather than warns, since a warning of a service is read
// too late. (On Windows, where the mode does not say who may read, it
// does not check.) Its errors never contain a secret.
func ReadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTokens, err)
	}
	defer f.Close()
	// The mode of the file read, not of the path: it may be replaced in
	// between.
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTokens, err)
	}
	if err := checkTokensMode(path, fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrTokens, err)
	case len(data) > maxTokenFile:
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrTokens, path, maxTokenFile)
	}
	t, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return t, nil
}

// maxTokenFile bounds a token file, which is read into memory.
const maxTokenFile = 1 << 20

// checkTokensMode refuses a token file that other users may read or
// write, or its group write, or another user owns.
func checkTokensMode(path string, fi fs.FileInfo) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	if uid, ok := fileOwner(fi); ok && uid != 0 && uid != os.Getuid() {
		return fmt.Errorf("%w: %s belongs to user %d, who may change it (chown it to the user distlock runs as, %d, or to root)",
			ErrTokens, path, uid, os.Getuid())
	}
	mode := fi.Mode()
	var who string
	switch perm := mode.Perm(); {
	case perm&0o006 == 0o006:
		who = "every user of this host may read and write it"
	case perm&0o004 != 0:
		who = "every user of this host may read it"
	case perm&0o002 != 0:
		who = "every user of this host may write it"
	case perm&0o020 != 0:
		who = "its group may write it"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s has mode %04o: %s (chmod go-w,o-r %s)", ErrTokens, path, mode.Perm(), who, path)
}

// ParseTokens reads the JSON form of a token file:
//
//	{"tokens": [
//	  {"name": "ci", "token": "SECRET", "prefixes": ["jobs/", "deploy/"], "max_sessions": 500},
//	  {"name": "ops", "token": "SECRET2", "prefixes": [""], "admin": true}
//	]}
//
// Each token has a unique name (shown in logs in place of the secret), a
// secret of at least 16 characters, and the prefixes of the lock names it
// may use ("" allows every name); admin allows forced releases.
// max_sessions, max_waiting and max_streams, if set, are the token's share
// of the gateway's limits; a token without them gets an even part of what
// the others leave (see WithTokens). Unknown fields are refused. Its
// errors never contain a secret.
func ParseTokens(data []byte) (*Tokens, error) {
	var f tokenFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		// A JSON syntax error can quote the input: say where, not what.
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("%w: invalid JSON at byte %d", ErrTokens, se.Offset)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%w: field %q has the wrong type", ErrTokens, te.Field)
		}
		if strings.HasPrefix(err.Error(), "json: unknown field ") {
			return nil, fmt.Errorf("%w: %s", ErrTokens, strings.TrimPrefix(err.Error(), "json: "))
		}
		return nil, fmt.Errorf("%w: not a token file", ErrTokens)
	}
	if len(f.Tokens) == 0 {
		return nil, fmt.Errorf("%w: no tokens", ErrTokens)
	}
	t := &Tokens{}
	seen := map[string]bool{}
	for i, e := range f.Tokens {
		switch {
		case e.Name == "":
			return nil, fmt.Errorf("%w: token %d has no name", ErrTokens, i+1)
		case seen[e.Name]:
			return nil, fmt.Errorf("%w: two tokens named %q", ErrTokens, e.Name)
		case len(e.Token) < minSecret:
			return nil, fmt.Errorf("%w: token %q is shorter than %d characters", ErrTokens, e.Name, minSecret)
		case len(e.Prefixes) == 0:
			return nil, fmt.Errorf("%w: token %q has no prefixes (\"\" allows every name)", ErrTokens, e.Name)
		case e.MaxSessions < 0 || e.MaxWaiting < 0 || e.MaxStreams < 0:
			return nil, fmt.Errorf("%w: token %q has a negative share (max_sessions, max_waiting or max_streams)", ErrTokens, e.Name)
		}
		for _, o := range t.list {
			if o.digest == sha256.Sum256([]byte(e.Token)) {
				return nil, fmt.Errorf("%w: tokens %q and %q have the same secret", ErrTokens, o.name, e.Name)
			}
		}
		seen[e.Name] = true
		t.list = append(t.list, token{name: e.Name, digest: sha256.Sum256([]byte(e.Token)),
			prefixes: e.Prefixes, admin: e.Admin, maxSessions: e.MaxSessions, maxWaiting: e.MaxWaiting, maxStreams: e.MaxStreams})
	}
	return t, nil
}

// principal is who a request comes from: a token, or anyone when the
// gateway has no tokens (see Gateway.anyone).
type principal struct {
	name     string // "" without tokens
	prefixes []string
	admin    bool
}

// authenticate finds the token of r. It compares the digest of the
// presented secret with every token's, in constant time, so that neither
// a match nor its position shows in the timing.
func (t *Tokens) authenticate(r *http.Request) (*principal, *problem) {
	h := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return nil, newProblem(http.StatusUnauthorized, ProblemUnauthorized, "an Authorization: Bearer token is required")
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(secret)))
	var found *token
	for i := range t.list {
		if subtle.ConstantTimeCompare(d[:], t.list[i].digest[:]) == 1 {
			found = &t.list[i]
		}
	}
	if found == nil {
		return nil, newProblem(http.StatusUnauthorized, ProblemUnauthorized, "unknown bearer token")
	}
	return &principal{name: found.name, prefixes: found.prefixes, admin: found.admin}, nil
}

// may reports whether p may use the lock name.
func (p *principal) may(name string) bool {
	for _, pre := range p.prefixes {
		if strings.HasPrefix(name, pre) {
			return true
		}
	}
	return false
}

// mayAll reports whether p may use every lock name.
func (p *principal) mayAll() bool { return slices.Contains(p.prefixes, "") }

// forbidden is the answer to p for a name it may not use.
func (p *principal) forbidden(name string) *problem {
	return newProblem(http.StatusForbidden, ProblemForbidden,
		fmt.Sprintf("token %q may not use lock %s", p.name, quoteName(name)))
}
