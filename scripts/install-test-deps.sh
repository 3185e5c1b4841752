#!/usr/bin/env bash
# Installs the servers that the integration tests start through
# testserver: redis-server, etcd + etcdctl, ZooKeeper, PostgreSQL and
# PgBouncer (Debian/Ubuntu packages), tmux, which the CLI's terminal
# tests drive, and Apache Curator with a JDK, with which the ZooKeeper
# interop tests build a Curator client, and a C compiler (gcc, libc6-dev),
# with which testserver builds the clock shim of a Redis whose
# clock a test moves. Idempotent and non-interactive. It
# does not run the tests.
#
# What it changes on the machine, and only when something is missing (it
# then needs root, or sudo): it installs the missing packages with apt-get
# (never upgrading one already installed), with /usr/sbin/policy-rc.d
# denying service starts for the time of the install, and it stops and
# disables the services of the packages it installed, since the tests start
# their own servers on free ports. Services that were there before are left
# alone. When nothing is missing it changes nothing.
set -euo pipefail

PACKAGES=(redis-server etcd-server etcd-client zookeeper postgresql pgbouncer tmux libcurator-recipes-java libcurator-framework-java default-jdk-headless chromium gcc libc6-dev)
SERVICES=(redis-server postgresql etcd zookeeper pgbouncer)

log() { printf 'install-test-deps: %s\n' "$*"; }

run() {
	log "+ $*"
	"$@"
}

# need_root sets SUDO for the commands that change the machine.
SUDO=()
need_root() {
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1; then
			SUDO=(sudo)
		else
			log "not root and sudo is not available; run this script as root" >&2
			exit 1
		fi
	fi
}

# installed reports whether the Debian package $1 is installed.
installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# service_package names the package that brings service $1.
service_package() {
	case "$1" in
	etcd) echo etcd-server ;;
	*) echo "$1" ;;
	esac
}

have_postgres() {
	local p
	for p in /usr/lib/postgresql/*/bin/postgres; do
		[ -x "$p" ] && return 0
	done
	return 1
}

# Debian installs pgbouncer in /usr/sbin, which a non-root PATH may lack.
have_pgbouncer() {
	command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]
}

have_zookeeper() {
	local j
	for j in /usr/share/java/zookeeper.jar /usr/share/zookeeper/zookeeper*.jar /usr/share/zookeeper/lib/zookeeper*.jar; do
		[ -f "$j" ] && return 0
	done
	return 1
}

missing=()
for bin in redis-server etcd etcdctl java javac tmux cc; do
	command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
have_postgres || missing+=("postgres (/usr/lib/postgresql/*/bin/postgres)")
have_zookeeper || missing+=("zookeeper (zookeeper.jar)")
[ -f /usr/share/java/curator-recipes.jar ] || missing+=("curator (curator-recipes.jar)")
have_pgbouncer || missing+=("pgbouncer")

new_packages=()
if [ "${#missing[@]}" -eq 0 ]; then
	log "all test dependencies are already installed; nothing changed"
else
	log "missing: ${missing[*]}"
	if ! command -v apt-get >/dev/null 2>&1; then
		log "apt-get not found; install these packages by hand: ${PACKAGES[*]}" >&2
		exit 1
	fi
	for pkg in "${PACKAGES[@]}"; do
		installed "$pkg" || new_packages+=("$pkg")
	done
	if [ "${#new_packages[@]}" -eq 0 ]; then
		log "every package is installed but something is missing: check ${PACKAGES[*]}" >&2
		exit 1
	fi
	need_root

	# Keep maintainer scripts from starting the services during the
	# install (invoke-rc.d honours policy-rc.d exit code 101), unless a
	# policy is already in place (as in many container images).
	policy=/usr/sbin/policy-rc.d
	created_policy=0
	if [ ! -e "$policy" ]; then
		log "+ create $policy (deny service starts during install)"
		printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
		"${SUDO[@]}" chmod 755 "$policy"
		created_policy=1
	fi
	remove_policy() {
		if [ "$created_policy" -eq 1 ]; then
			log "+ rm -f $policy"
			"${SUDO[@]}" rm -f "$policy"
		fi
	}
	trap remove_policy EXIT

	run "${SUDO[@]}" apt-get update
	run "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${new_packages[@]}"

	remove_policy
	trap - EXIT
fi

# Stop and disable the services of the packages installed above (the
# policy kept them from starting, unless one was already in place that
# allows it), so that they do not start at boot. Services that were there
# before are not touched.
systemd_running=0
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	systemd_running=1
fi
for svc in "${SERVICES[@]}"; do
	pkg="$(service_package "$svc")"
	case " ${new_packages[*]} " in
	*" $pkg "*) ;;
	*) continue ;;
	esac
	if [ ! -e "/etc/init.d/$svc" ] && [ ! -e "/lib/systemd/system/$svc.service" ] && [ ! -e "/usr/lib/systemd/system/$svc.service" ]; then
		continue
	fi
	if [ "$systemd_running" -eq 1 ]; then
		run "${SUDO[@]}" systemctl disable --now "$svc" || true
	else
		if command -v service >/dev/null 2>&1; then
			run "${SUDO[@]}" service "$svc" stop || true
		fi
		if command -v update-rc.d >/dev/null 2>&1 && [ -e "/etc/init.d/$svc" ]; then
			run "${SUDO[@]}" update-rc.d "$svc" disable || true
		fi
	fi
done

log "redis-server: $(command -v redis-server)"
log "etcd:         $(command -v etcd)"
log "etcdctl:      $(command -v etcdctl)"
log "java:         $(command -v java)"
log "tmux:         $(command -v tmux)"
for p in /usr/lib/postgresql/*/bin/postgres; do
	[ -x "$p" ] && log "postgres:     $p"
done
for j in /usr/share/java/zookeeper.jar /usr/share/zookeeper/zookeeper*.jar; do
	[ -f "$j" ] && log "zookeeper:    $j"
done
log "pgbouncer:    $(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
log "done"
