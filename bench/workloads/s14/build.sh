#!/bin/bash
# Builds the fourteenth sweep's Go program into bin/ (BENCHMARKS.md, "The Go
# runtime's thread ids").
set -e
cd "$(dirname "$0")"; mkdir -p bin
(cd gospin && GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPROXY=off go build -o ../bin/gospin .)
