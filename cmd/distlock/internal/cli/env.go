package cli

import (
	"strconv"
	"strings"

	"github.com/distlock/distlock/driver"
)

// backendEnv is the environment variable that names the lock service.
const backendEnv = "DISTLOCK_BACKEND"

// commandEnv is the environment of the command that `distlock run` runs:
// environ with DISTLOCK_KEY and DISTLOCK_TOKEN, and with the password
// taken out of DISTLOCK_BACKEND. The command is not distlock: it may print
// or report its environment, and the password is distlock's to use. A
// `distlock run` inside the command then reaches the same service, and
// fails to authenticate (rather than take locks elsewhere) until it is
// given the password itself. A DISTLOCK_BACKEND that cannot be parsed, and
// so cannot be cleaned, is left out.
func commandEnv(environ []string, key string, token uint64) []string {
	env := make([]string, 0, len(environ)+2)
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if name == backendEnv {
			clean, ok := withoutSecrets(value)
			if !ok {
				continue
			}
			kv = name + "=" + clean
		}
		env = append(env, kv)
	}
	return append(env, "DISTLOCK_KEY="+key, "DISTLOCK_TOKEN="+strconv.FormatUint(token, 10))
}

// withoutSecrets returns rawURL without the password of its user and
// without its password-like query parameters (see
// driver.WithoutSecrets); false if that cannot be done with
// certainty.
func withoutSecrets(rawURL string) (string, bool) { return driver.WithoutSecrets(rawURL) }
