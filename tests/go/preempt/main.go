// preempt: the Go runtime stops a goroutine that loops without calling a
// function by a signal to its thread, sent to the thread id the runtime
// recorded when the thread started (m.procid); a garbage collection must
// do so to stop the world. Each round starts such a loop, collects, then
// ends the loop: a round whose collection cannot stop the loop never ends.
// Usage: preempt ROUNDS. Prints READY, a line per round, then DONE.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
)

func main() {
	rounds, err := strconv.Atoi(os.Args[1])
	if err != nil {
		panic(err)
	}
	runtime.GOMAXPROCS(2)
	fmt.Println("READY", os.Getpid())
	for r := 1; r <= rounds; r++ {
		var stop atomic.Bool
		done := make(chan uint64)
		go func(x uint64) {
			for !stop.Load() {
				x = x*6364136223846793005 + 1442695040888963407
			}
			done <- x
		}(uint64(r))
		time.Sleep(20 * time.Millisecond)
		runtime.GC()
		stop.Store(true)
		<-done
		fmt.Println("round", r)
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println("DONE")
}
