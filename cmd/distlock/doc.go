// Command distlock runs a command under a distributed lock:
//
//	distlock run [flags] KEY -- CMD [ARGS...]
//	distlock status [PREFIX]
//
// The lock service is chosen with --backend URL or $DISTLOCK_BACKEND; the
// default is a lock directory on this host (file://). See `distlock --help`,
// README.md and the documentation of internal/cli.
package main
