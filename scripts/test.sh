#!/usr/bin/env bash
# Installs every server the tests need, then runs every test with the race
# detector, as CI does. Usage: scripts/test.sh
#
# The install changes the machine only when something is missing, and then
# needs root or sudo: see scripts/install-test-deps.sh for what it does.
# The tests themselves start their own servers on free ports.
#
# The tests run in an order shuffled with one seed, printed first. Every
# step runs even when an earlier one failed; at the end the script names
# the failed steps and the failing tests, each package with the command
# that runs its failing tests again in the same order. TEST_SHUFFLE=N
# runs the whole script again with seed N. Each module that go.work lists
# is vetted and tested on its own, without the go.work.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh

# Under CI=true a missing server fails a test instead of skipping it.
export CI="${CI:-true}"

seed="${TEST_SHUFFLE:-$(date +%s%N)}"
if ! [[ "$seed" =~ ^-?[0-9]+$ ]]; then
	echo "test.sh: TEST_SHUFFLE must be an integer, not \"$seed\"" >&2
	exit 2
fi
echo "test.sh: shuffle seed $seed (TEST_SHUFFLE=$seed scripts/test.sh runs the tests in the same order)"

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
failed_steps=()
nlogs=0

# step NAME DIR COMMAND...: runs COMMAND in DIR (a module's directory),
# keeping its output in a log for the summary; a failure is recorded, and
# the next step runs.
step() {
	local name="$1" dir="$2"
	shift 2
	nlogs=$((nlogs + 1))
	local log="$logs/$nlogs.log"
	printf '%s\n' "$dir" >"$log.dir"
	printf '%s\n' "$*" >"$log.cmd"
	echo "test.sh: $name"
	if ! (cd "$dir" && "$@") 2>&1 | tee "$log"; then
		failed_steps+=("$nlogs:$name")
	fi
}

# failures N prints, for each package that failed in the output of step
# N (go test without -v), its failing tests (the innermost ones) and the
# command that runs them again, in the order of the shuffle.
failures() {
	local race=""
	case " $(cat "$logs/$1.log.cmd") " in *" -race "*) race="-race " ;; esac
	awk -v seed="$seed" -v dir="$(cat "$logs/$1.log.dir")" -v race="$race" '
	function flush(pkg, why,    i, j, top, seen, run, n, inner) {
		printf "    %s%s\n", pkg, why
		n = 0
		for (i = 1; i <= nfail; i++) {
			inner = 1
			for (j = 1; j <= nfail; j++) {
				if (index(fail[j], fail[i] "/") == 1) {
					inner = 0
				}
			}
			if (inner) {
				printf "      --- FAIL: %s%s\n", fail[i], note[i]
			}
			top = fail[i]
			sub(/\/.*/, "", top)
			if (!(top in seen)) {
				seen[top] = 1
				run = run (n++ ? "|" : "") top
			}
		}
		printf "      again: %sGOWORK=off go test %s-count=1 -shuffle=%s", (dir != "." ? "(cd " dir " && " : ""), race, seed
		if (n > 0) {
			printf " -run '\''^(%s)$'\''", run
		}
		printf " %s%s\n", pkg, (dir != "." ? ")" : "")
		nfail = 0
		timedout = 0
	}
	# A test that failed, at any depth.
	/^ *--- FAIL: / {
		name = $0
		sub(/^ *--- FAIL: /, "", name)
		sub(/ \([0-9.]+s\)$/, "", name)
		fail[++nfail] = name
		note[nfail] = ""
		next
	}
	# A test binary that timed out lists the tests still running.
	/^panic: test timed out/ { timedout = 1; next }
	timedout && /^\t\t[^ ]+ \(/ {
		fail[++nfail] = $1
		note[nfail] = " (still running at the timeout)"
		next
	}
	# The end of a failed package: "FAIL<TAB>pkg<TAB>time", or
	# "FAIL<TAB>pkg [build failed]".
	/^FAIL\t/ {
		split($0, f, "\t")
		why = ""
		if (f[2] ~ / \[.*\]$/) {
			why = f[2]
			sub(/^[^ ]* /, " ", why)
			sub(/ \[.*\]$/, "", f[2])
		} else if (nfail == 0) {
			why = " (no test reported failing: TestMain or the test binary failed; see its output above)"
		}
		flush(f[2], why)
	}
	' "$logs/$1.log"
}

# Every module of the repository, as go.work lists them. Each is vetted
# and tested on its own, without the go.work (GOWORK=off), as a user's
# build sees it: a require missing from a module's go.mod fails here.
# (The list is read from go.work whatever GOWORK says in the caller's
# environment, and a failure to read it stops the script: a short list
# would pass without testing the rest.)
root="$(pwd)"
list="$(GOWORK="$root/go.work" go list -m -f '{{.Dir}}')"
mapfile -t dirs <<<"$list"
if [ "${#dirs[@]}" -lt 2 ] || [ "${dirs[0]}" != "$root" ]; then
	echo "test.sh: go.work lists the modules ${dirs[*]}: want the root module first, and the others" >&2
	exit 2
fi
# Every go.mod of the repository must be in go.work: a module left out
# would never be tested. (Today: the root module, internal/redis,
# redislock, redlock, etcdlock, zklock, pglock, cmd/distlock, bench and
# torture.)
while IFS= read -r f; do
	want="$root/$(dirname "$f")"
	want="${want%/.}"
	found=""
	for dir in "${dirs[@]}"; do
		if [ "$dir" = "$want" ]; then found=1; fi
	done
	if [ -z "$found" ]; then
		echo "test.sh: $f is not in go.work: add its directory to go.work's use list" >&2
		exit 2
	fi
done < <(git ls-files 'go.mod' '*/go.mod')
modules=()
for dir in "${dirs[@]}"; do
	modules+=("${dir#"$root"}")
done
export GOWORK=off
for m in "${modules[@]}"; do
	dir=".${m}"
	case "$m" in
	/bench)
		step "bench module: vet" bench go vet ./...
		step "bench module: tests and a smoke run" bench go test -race -shuffle="$seed" -count=1 -timeout 15m ./...
		;;
	/torture)
		# The short run: one fault round per scenario and store mode.
		step "torture module: vet" torture go vet ./...
		step "torture module: the short run" torture go test -race -shuffle="$seed" -count=1 -timeout 20m ./...
		;;
	"")
		step "root module: vet" . go vet ./...
		step "root module: go test -race" . go test -race -shuffle="$seed" -count=1 -timeout 30m ./...
		;;
	*)
		step "module ${m#/}: vet" "$dir" go vet ./...
		step "module ${m#/}: go test -race" "$dir" go test -race -shuffle="$seed" -count=1 -timeout 30m ./...
		;;
	esac
done
# The allocation bounds skip under the race detector (it allocates): they
# run once more without it.
step "allocation bounds (without the race detector)" . go test -shuffle="$seed" -count=1 -timeout 10m -run 'Allocs' .
step "allocation bounds of redislock (without the race detector)" redislock go test -shuffle="$seed" -count=1 -timeout 10m -run 'Allocs' .

if [ "${#failed_steps[@]}" -eq 0 ]; then
	echo "test.sh: all tests passed"
	exit 0
fi
echo
echo "test.sh: FAILED (shuffle seed $seed); the failed steps and their failing tests:"
for f in "${failed_steps[@]}"; do
	echo "  ${f#*:}"
	failures "${f%%:*}"
done
echo "test.sh: the whole run again in the same order: TEST_SHUFFLE=$seed scripts/test.sh"
exit 1
