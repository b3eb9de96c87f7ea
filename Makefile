# pmig — two commands for a newcomer:
#   make demo   run the main job on a local cluster
#   make test   install what is missing, build, and run every test
SHELL := /bin/bash
CARGO ?= cargo
PMIG := target/release/pmig
APT_PKGS := build-essential binutils iproute2 bc python3 strace iputils-ping gzip coreutils fonts-dejavu-core

.PHONY: all build test deps demo bench bench-quick fmt clippy clean

all: build

# Install system packages the build and tests need (only what is missing).
deps:
	@missing=""; \
	for c in cc:build-essential go:golang-go readelf:binutils objcopy:binutils ip:iproute2 tc:iproute2 bc:bc python3:python3 strace:strace ping:iputils-ping; do \
	  command -v $${c%%:*} >/dev/null 2>&1 || missing="$$missing $${c##*:}"; \
	done; \
	[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || missing="$$missing libc6-dev"; \
	[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing="$$missing fonts-dejavu-core"; \
	[ -x /usr/bin/python3 ] || missing="$$missing python3"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust (rustup) first"; exit 1; }

build: deps
	$(CARGO) build --release --workspace

test: build
	$(CARGO) test --release --workspace -- --test-threads=2

demo: build
	./scripts/demo.sh

# The engine's throughput against its limits, then every strategy × link ×
# workload on a local cluster (BENCHMARKS.md; report in bench-results/<time>/).
bench: build
	$(MAKE) -s -C bench/workloads
	$(PMIG) bench engine --sizes 64,1024,4096 --reps 3
	$(PMIG) bench

# The strategy comparison's small matrix (under 2 minutes; what CI runs).
bench-quick: build
	$(MAKE) -s -C bench/workloads
	$(PMIG) bench --quick

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
