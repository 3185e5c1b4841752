// Module internal/redis holds what redislock and redlock share: the
// Redis URL forms (package redisurl), the sorting of go-redis's errors
// (package rediserr), and the command arguments that hold a secret and
// stay out of command logs (package redact, with package redacttest, a
// hook that records commands as logging hooks render them, for tests).
// Only this repository's modules can import it.
//
// It is a module of its own so that the root module requires no Redis
// client. Version selection may pair an older redislock or redlock with a
// newer internal/redis, so its exported API only grows: a released name
// keeps its meaning and signature (see RELEASING.md).
package redis
