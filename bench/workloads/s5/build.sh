#!/bin/bash
# Builds the fifth sweep's helper programs into bin/ (bench/sweep5-cases.txt).
set -e
cd "$(dirname "$0")"; mkdir -p bin
F="-O2 -Wall"
gcc $F -o bin/compute compute.c
gcc $F -static -o bin/compute-static compute.c
gcc $F -o bin/shmkinds shmkinds.c
gcc $F -pthread -o bin/threads64 threads64.c
gcc $F -fPIC -shared -o bin/cntrand.so cntrand.c -ldl
gcc $F -o bin/userand userand.c
gcc $F -o bin/vmkinds vmkinds.c
gcc $F -o bin/fdkinds fdkinds.c
gcc $F -o bin/seccomp seccomp.c
gcc $F -o bin/bigmem bigmem.c
gcc $F -o bin/iouring iouring.c
gcc $F -o bin/mlockt mlockt.c
gcc $F -pthread -o bin/recmutex recmutex.c
gcc $F -pthread -o bin/prctls prctls.c
gcc $F -o bin/altstk altstk.c
gcc $F -o bin/vmamany vmamany.c
mkdir -p bin/java && javac -d bin/java JPar.java
(cd /tmp && CGO_ENABLED=0 go build -o "$OLDPWD/bin/gostatic" "$OLDPWD/gostatic.go")
