// gospin: one goroutine spins in a loop without calls, ROUNDS times 3e9
// steps (about 3.3 s each here), while the main goroutine allocates 64 KiB
// every millisecond. Each collection must stop the world, and so preempt
// the loop with a signal sent to its thread by the id the runtime recorded
// (m.procid). Prints the loop's result; on stderr, how many allocations the
// main goroutine made and in how long: when the signal goes astray they
// wait for the loop to return.
// Usage: gospin ROUNDS
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

var sink [][]byte

//go:noinline
func spin(n uint64) uint64 {
	s := uint64(1)
	for i := uint64(0); i < n; i++ {
		s = s*6364136223846793005 + i
	}
	return s
}

func main() {
	rounds, _ := strconv.Atoi(os.Args[1])
	done := make(chan uint64)
	go func() {
		var t uint64
		for r := 0; r < rounds; r++ {
			t ^= spin(3_000_000_000)
		}
		done <- t
	}()
	allocs := 0
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	for {
		select {
		case t := <-done:
			fmt.Println("spin", t, "allocs>0", allocs > 0)
			fmt.Fprintln(os.Stderr, "allocs", allocs, "elapsed_ms", time.Since(start).Milliseconds())
			return
		case <-tick.C:
			sink = append(sink, make([]byte, 1<<16))
			if len(sink) > 256 {
				sink = sink[:0]
			}
			allocs++
		}
	}
}
