package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
)

// Goroutines computing in rounds; statically linked with CGO_ENABLED=0.
func main() {
	var total [16]uint64
	rounds, _ := strconv.Atoi(os.Args[1])
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				x := uint64(88172645463325252) + uint64(g*7919+r)
				m := make(map[uint64]uint64)
				for i := 0; i < 400000; i++ {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
					m[x%5000] += x
				}
				var s uint64
				for k := uint64(0); k < 5000; k++ {
					s = s*31 + m[k]
				}
				total[g] += s
			}(g)
		}
		wg.Wait()
		var s uint64
		for _, t := range total {
			s = s*131 + t
		}
		fmt.Printf("round %d %016x\n", r, s)
	}
}
