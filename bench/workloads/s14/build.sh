#!/bin/bash
# Builds the fourteenth sweep's Go program into bin/, with and without its
# symbol table (BENCHMARKS.md, "The Go runtime's thread ids").
set -e
cd "$(dirname "$0")"; mkdir -p bin
(cd gospin && GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPROXY=off go build -o ../bin/gospin .)
# The same without its symbol table, as many released Go programs are built.
(cd gospin && GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPROXY=off go build -ldflags='-s -w' -o ../bin/gospin-stripped .)
