// Go workload for rtm-trace's tests: goroutines contend on one sync.Mutex for a while.
//
//	go_mutex [GOROUTINES MS]   (default 8 goroutines, 1000 ms)
//
// Prints `truth goroutines=G acquisitions=N mutex_contention_cycles=C` at the end: the
// acquisitions made, and how long goroutines waited on the mutex by Go's own mutex
// profile (every contention event sampled; CPU ticks). A goroutine that
// blocks on the mutex parks in the Go runtime, not on a futex: the futex waits of this
// process are the runtime's own (idle threads parking, its internal locks).
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"
)

var (
	mu       sync.Mutex
	acquired uint64
	work     uint64
)

func main() {
	goroutines, ms := 8, 1000
	if len(os.Args) == 3 {
		goroutines, _ = strconv.Atoi(os.Args[1])
		ms, _ = strconv.Atoi(os.Args[2])
	}
	runtime.SetMutexProfileFraction(1)
	deadline := time.Now().Add(time.Duration(ms) * time.Millisecond)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				mu.Lock()
				acquired++
				for i := 0; i < 200; i++ {
					work += uint64(i & 1)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("truth goroutines=%d acquisitions=%d mutex_contention_cycles=%d\n",
		goroutines, acquired, mutexContention())
}

// The mutex profile's total delay, in the runtime's CPU ticks.
func mutexContention() int64 {
	recs := make([]runtime.BlockProfileRecord, 64)
	n, ok := runtime.MutexProfile(recs)
	for !ok {
		recs = make([]runtime.BlockProfileRecord, n+16)
		n, ok = runtime.MutexProfile(recs)
	}
	var cycles int64
	for _, r := range recs[:n] {
		cycles += r.Cycles
	}
	return cycles
}
