#!/bin/sh
# Runs gowork.go's program (the sweeps' Go workload), built with `go build`
# into ${GOWORK_DIR:-/tmp/s37} the first time; execs it in its place, so
# that the pid that started is the one to move.
set -e
d=${GOWORK_DIR:-/tmp/s37}
if [ ! -x "$d/gowork" ]; then
    mkdir -p "$d"
    cp "$(dirname "$(realpath "$0")")/gowork.go" "$d/"
    (cd "$d" && { [ -f go.mod ] || go mod init gowork; } && go build -o gowork gowork.go) >"$d/build.log" 2>&1
fi
exec "$d/gowork" "$@"
