#!/usr/bin/env bash
# Installs every server the tests need, then runs every test with the race
# detector, as CI does. Usage: scripts/test.sh
#
# The install changes the machine only when something is missing, and then
# needs root or sudo: see scripts/install-test-deps.sh for what it does.
# The tests themselves start their own servers on free ports.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh

# Under CI=true a missing server fails a test instead of skipping it.
export CI="${CI:-true}"

echo "test.sh: go vet"
go vet ./...
echo "test.sh: go test -race (all packages)"
go test -race -shuffle=on -count=1 -timeout 30m ./...
# The allocation bounds skip under the race detector (it allocates): they
# run once more without it.
echo "test.sh: allocation bounds (without the race detector)"
go test -count=1 -timeout 10m -run 'Allocs' . ./redislock/

if [ -f bench/go.mod ]; then
	echo "test.sh: bench module: vet, tests and a smoke run"
	(cd bench && go vet ./... && go test -race -count=1 -timeout 15m ./...)
fi
if [ -f torture/go.mod ]; then
	# The short run: one fault round per scenario and store mode.
	echo "test.sh: torture module: vet and the short run"
	(cd torture && go vet ./... && go test -race -shuffle=on -count=1 -timeout 20m ./...)
fi
echo "test.sh: all tests passed"
