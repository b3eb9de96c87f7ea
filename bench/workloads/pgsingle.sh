#!/bin/sh
# PostgreSQL's single-user backend (one process: shared buffers in shared
# anonymous memory, a System V segment, WAL and data files, sorts spilled
# to temporary files) running bench/workloads/pgsingle.sql, for the sweeps
# (bench/sweep58-cases.txt). Makes its data directory once, in $PGDIR
# (default /var/tmp/pmig-pgsingle), owned by the postgres user, and execs
# the backend in its place, so that the pid that started is the one to move.
set -e
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
d=${PGDIR:-/var/tmp/pmig-pgsingle}
sql=$(dirname "$(realpath "$0")")/pgsingle.sql
as_pg() { setpriv --reuid postgres --regid postgres --init-groups "$@"; }
if [ ! -s "$d/data/PG_VERSION" ]; then
    mkdir -p "$d" && chown postgres: "$d"
    as_pg "$bin/initdb" -D "$d/data" >"$d/initdb.log" 2>&1
fi
exec setpriv --reuid postgres --regid postgres --init-groups \
    "$bin/postgres" --single -D "$d/data" postgres <"$sql"
