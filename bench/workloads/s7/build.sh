#!/bin/bash
# Builds the seventh sweep's helper programs into bin/ (bench/sweep7-cases.txt).
set -e
cd "$(dirname "$0")"; mkdir -p bin
F="-O2 -Wall"
gcc $F -pthread -o bin/arenas arenas.c
gcc $F -o bin/madvwork madvwork.c
