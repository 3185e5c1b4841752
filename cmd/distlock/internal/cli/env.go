package cli

import (
	"strconv"
	"strings"

	"github.com/distlock/distlock/driver"
)

// backendEnv is the environment variable that names the lock service.
const backendEnv = "DISTLOCK_BACKEND"

// commandEnv is the environment of the command that `distlock run` runs:
// environ with DISTLOCK_KEY and DISTLOCK_TOKEN, DISTLOCK_SLOT when slot is
// not negative (a permit's slot), and with DISTLOCK_BACKEND
// set to backendURL, the lock service that distlock used (from --backend
// or from DISTLOCK_BACKEND), with its password taken out; without
// DISTLOCK_BACKEND when backendURL is "" (the default, file://, which is
// the same for every process of the user).
//
// The command is not distlock: it may print or report its environment,
// and the password is distlock's to use. A `distlock run` inside the
// command then reaches the same service, and fails to authenticate
// (rather than take locks elsewhere) until it is given the password
// itself. A URL that cannot be cleaned with certainty (see
// driver.WithoutSecrets: a password holding "?" is one) is not passed
// at all, and neither is the DISTLOCK_BACKEND of environ, which may name
// another service: passed is then false, and the caller says so, since a
// distlock inside the command would take its locks in the default
// file:// directory unless given --backend.
//
// The DISTLOCK_ variables that environ has (a distlock run inside another
// one's command) are left out first: a program reads the first of two
// variables of one name (getenv in C and Go), which would be the outer
// run's key, token or slot.
//
// extra are more variables, NAME=VALUE (partition's DISTLOCK_UNIT,
// DISTLOCK_GROUP and DISTLOCK_MEMBER), added last; variables of their
// names in environ are left out too.
func commandEnv(environ []string, backendURL, key string, token uint64, slot int, extra ...string) (env []string, passed bool) {
	env = make([]string, 0, len(environ)+4+len(extra))
	drop := map[string]bool{backendEnv: true, "DISTLOCK_KEY": true, "DISTLOCK_TOKEN": true, "DISTLOCK_SLOT": true}
	for _, kv := range extra {
		name, _, _ := strings.Cut(kv, "=")
		drop[name] = true
	}
	for _, kv := range environ {
		if name, _, _ := strings.Cut(kv, "="); !drop[name] {
			env = append(env, kv)
		}
	}
	passed = true
	if backendURL != "" {
		var clean string
		if clean, passed = withoutSecrets(backendURL); passed {
			env = append(env, backendEnv+"="+clean)
		}
	}
	env = append(env, "DISTLOCK_KEY="+key, "DISTLOCK_TOKEN="+strconv.FormatUint(token, 10))
	if slot >= 0 {
		env = append(env, "DISTLOCK_SLOT="+strconv.Itoa(slot))
	}
	env = append(env, extra...)
	return env, passed
}

// withoutSecrets returns rawURL without the password of its user and
// without its password-like query parameters (see
// driver.WithoutSecrets); false if that cannot be done with
// certainty.
func withoutSecrets(rawURL string) (string, bool) { return driver.WithoutSecrets(rawURL) }
