package cli

// The backends the command opens by URL: each registers its schemes with
// package backends when it is imported (filelock, on Unix, in
// backends_file.go).
import (
	_ "github.com/distlock/distlock/etcdlock"
	_ "github.com/distlock/distlock/gatewaylock"
	_ "github.com/distlock/distlock/pglock"
	_ "github.com/distlock/distlock/redislock"
	_ "github.com/distlock/distlock/redlock"
	_ "github.com/distlock/distlock/zklock"
)
