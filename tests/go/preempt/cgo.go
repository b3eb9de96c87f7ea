//go:build withcgo

// Built with -tags withcgo (and CGO_ENABLED=1), the program uses cgo: the
// runtime starts its threads with pthread_create, and keeps each thread's
// goroutine in a thread-local variable of the C library's thread pointer
// rather than in its own m.
package main

import "C"
