// Command distlock runs a command under a distributed lock:
//
//	distlock run [flags] KEY -- CMD [ARGS...]
//	distlock elect [flags] NAME -- CMD [ARGS...]
//	distlock leader [--json] [--watch] NAME
//	distlock status [PREFIX]
//
// The lock service is chosen with --backend URL or $DISTLOCK_BACKEND; the
// default is a lock directory on this host (file://). See `distlock --help`,
// README.md and the documentation of internal/cli.
//
// The command is a module of its own, with every backend, the gateway and
// the OTel SDK with its Prometheus exporter, none of which a program that
// imports distlock's packages gets:
//
//	go install github.com/distlock/distlock/cmd/distlock@latest
package main
