package main

import (
	"crypto/sha256"
	"fmt"
	"sync"
)

func main() {
	const workers = 4
	var wg sync.WaitGroup
	res := make([][32]byte, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			m := map[int][]byte{}
			h := sha256.New()
			for i := 0; i < 60000000; i++ {
				b := []byte(fmt.Sprintf("%d-%d", w, i))
				m[i%200000] = b
				if i%7 == 0 {
					h.Write(m[(i*31)%200000])
				}
			}
			copy(res[w][:], h.Sum(nil))
		}(w)
	}
	wg.Wait()
	for _, r := range res {
		fmt.Printf("%x\n", r[:8])
	}
}
