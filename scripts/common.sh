# scripts/common.sh: the set-up shared by 'make test', 'make demo' and
# 'make bench' — install what is missing, build, install, and run a
# throwaway PostgreSQL cluster that is removed again on exit.
#
# Source it; it defines functions and sets ROOT, PG_MAJOR, PGBIN, PG_CONFIG.
# JOBGUARD_PGBIN names another PostgreSQL bin directory to build, install
# and test with (a private copy of the tree, on a machine whose system
# PostgreSQL is shared); the default is Debian's.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_MAJOR=${PG_MAJOR:-15}
PGBIN=${JOBGUARD_PGBIN:-/usr/lib/postgresql/$PG_MAJOR/bin}
PG_CONFIG=$PGBIN/pg_config
CLUSTER_DIR=

# as_root: run a command as root (directly, or through sudo).
as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# ensure_packages [extra...]: install the Debian packages jobguard needs
# (and any extra ones named) that are not installed yet.  python3-psycopg
# and python3-pytest are for the Python client (clients/python) and the
# random test; pg_auto_failover (the CLI and its extension) and DBD::Pg (its
# clients use libpq's multi-host connection strings) run the failover test,
# t/008_failover.pl; pg_cron runs the periodic-jobs recipe's test,
# t/020_pg_cron.pl.  python3-build and python3-venv build and install the
# Python client's wheel (clients/python/package-check); pgbouncer runs the
# pooler pass and sqlsmith the fuzz run (scripts/run-pooler-tests,
# scripts/run-fuzz); chromium and a font for its pages (fonts-dejavu-core)
# the console's browser test and screenshots (console/run-tests).  The
# benchmark names its own extras: bench/run adds gnuplot-nox (its charts),
# procps and DBD::Pg; make test does not need them.
ensure_packages() {
	local p missing=()
	for p in make gcc "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" \
		"postgresql-$PG_MAJOR-plproxy" "postgresql-$PG_MAJOR-cron" libipc-run-perl python3-psycopg python3-pytest \
		python3-build python3-venv pgbouncer sqlsmith chromium fonts-dejavu-core \
		pg-auto-failover-cli "postgresql-$PG_MAJOR-auto-failover" libdbd-pg-perl "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "jobguard: installing Debian packages: ${missing[*]}"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# build_and_install: compile jobguard and install it into PostgreSQL, with
# jobguard_proxy, the PL/Proxy layer for sharded deployments.  PG_CFLAGS
# (e.g. -Werror in CI) is passed through when set.  Returns non-zero at the
# first step that fails (also where the caller's set -e does not apply).
build_and_install() {
	echo "jobguard: building and installing against $("$PG_CONFIG" --version)"
	# scripts an earlier install left (a full jobguard--1.1.sql would be
	# taken for a shorter way to 1.2 than the update scripts) go first
	local ext
	ext="$("$PG_CONFIG" --sharedir)/extension"
	make -C "$ROOT" -s PG_CONFIG="$PG_CONFIG" ${PG_CFLAGS:+PG_CFLAGS="$PG_CFLAGS"} &&
		as_root rm -f "$ext"/jobguard--*.sql "$ext"/jobguard_proxy--*.sql &&
		as_root make -C "$ROOT" -s PG_CONFIG="$PG_CONFIG" install &&
		as_root make -C "$ROOT/proxy" -s PG_CONFIG="$PG_CONFIG" install
}

# free_port: print a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
	local p
	for p in $(shuf -i 20000-60000 -n 100); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	echo "jobguard: no free port found" >&2
	return 1
}

# as_cluster_owner: run a command as the cluster's owner.  initdb refuses to
# run as root, so root runs the server as the postgres user.
as_cluster_owner() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# as_cluster_owner_prefix: the words that run a command line as the
# cluster's owner (empty unless root), for a command given to a test.
as_cluster_owner_prefix() {
	if [ "$(id -u)" = 0 ]; then echo "runuser -u postgres -- "; fi
}

# start_cluster [postgres -c options...]: initdb and start a throwaway
# cluster in a temporary directory on a free port; export PGHOST, PGPORT,
# PGUSER and PGDATABASE for it; remove it on exit, also when interrupted.
# PG_CTL_OPTS adds options to pg_ctl start (run-valgrind's server binary).
start_cluster() {
	CLUSTER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/jobguard.XXXXXX")
	chmod 755 "$CLUSTER_DIR"
	[ "$(id -u)" = 0 ] && chown postgres: "$CLUSTER_DIR"
	trap stop_cluster EXIT
	trap 'exit 130' INT TERM HUP

	if ! as_cluster_owner "$PGBIN/initdb" -D "$CLUSTER_DIR/data" -A trust -U postgres \
		-E UTF8 --locale=C.UTF-8 --no-sync >"$CLUSTER_DIR/initdb.log" 2>&1; then
		cat "$CLUSTER_DIR/initdb.log" >&2
		return 1
	fi
	PGPORT=$(free_port)
	local opts="-p $PGPORT -k $CLUSTER_DIR -c listen_addresses=127.0.0.1 -c fsync=off"
	local o
	for o in "$@"; do opts="$opts -c $o"; done
	if ! as_cluster_owner "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" \
		-w -t 60 ${PG_CTL_OPTS:-} -o "$opts" start >/dev/null; then
		cat "$CLUSTER_DIR/server.log" >&2
		return 1
	fi
	export PGHOST=$CLUSTER_DIR PGPORT PGUSER=postgres PGDATABASE=postgres
	# how a test restarts this cluster (the HTTP example's reconnect test)
	export JOBGUARD_TEST_RESTART="$(as_cluster_owner_prefix)$PGBIN/pg_ctl -D $CLUSTER_DIR/data -l $CLUSTER_DIR/server.log -m fast -w -t 60 restart"
	echo "jobguard: throwaway cluster on port $PGPORT in $CLUSTER_DIR"
}

# stop_cluster: stop the throwaway cluster and remove its directory.
stop_cluster() {
	[ -n "$CLUSTER_DIR" ] || return 0
	as_cluster_owner "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
	rm -rf "$CLUSTER_DIR"
	CLUSTER_DIR=
}
