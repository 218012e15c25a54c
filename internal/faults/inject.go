//go:build ferry_faults

package faults

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// A ferry_faults build injects the faults FERRY_FAULTS names, comma
// separated: NAME once, NAME:N the next N times.
func init() {
	var mu sync.Mutex
	left := map[string]int{}
	for _, f := range strings.Split(os.Getenv("FERRY_FAULTS"), ",") {
		name, n, ok := strings.Cut(f, ":")
		times, err := strconv.Atoi(n)
		if !ok || err != nil || times < 1 {
			times = 1
		}
		if name != "" {
			left[name] += times
		}
	}
	Inject = func(name string) bool {
		mu.Lock()
		defer mu.Unlock()
		if left[name] == 0 {
			return false
		}
		left[name]--
		return true
	}
}
