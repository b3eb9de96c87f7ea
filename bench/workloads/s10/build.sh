#!/bin/bash
# Builds the tenth sweep's helper program into bin/ (bench/sweep10-cases.txt).
set -e
cd "$(dirname "$0")"; mkdir -p bin
(cd /tmp && CGO_ENABLED=1 go build -o "$OLDPWD/bin/gocgo" "$OLDPWD/gocgo.go")
