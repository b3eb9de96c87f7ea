package main

// Goroutines that allocate (so the garbage collector's workers run) and
// call into C through cgo, which links the program dynamically against
// libc and gives the Go runtime threads created by pthread_create.

/*
#include <stdint.h>
static uint64_t mix(uint64_t x, uint64_t k) {
	for (int i = 0; i < 64; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17; x += k;
	}
	return x;
}
*/
import "C"

import (
	"fmt"
	"os"
	"strconv"
	"sync"
)

func main() {
	rounds, _ := strconv.Atoi(os.Args[1])
	var total uint64
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		sums := make([]uint64, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				x := uint64(88172645463325252) + uint64(g*7919+r)
				keep := make([][]byte, 0, 64)
				for i := 0; i < 20000; i++ {
					x = uint64(C.mix(C.uint64_t(x), C.uint64_t(i)))
					b := make([]byte, 64+int(x%4000))
					b[len(b)-1] = byte(x)
					keep = append(keep, b)
					if len(keep) == cap(keep) {
						keep = keep[:0]
					}
					sums[g] += uint64(b[len(b)-1]) + uint64(len(b))
				}
			}(g)
		}
		wg.Wait()
		for _, s := range sums {
			total = total*31 + s
		}
	}
	fmt.Println("rounds", rounds, "total", total)
}
