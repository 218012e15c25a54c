//go:build ferry_faults

package proxy

import (
	"os"
	"slices"
	"strings"
	"sync"
)

// A ferry_faults build injects each fault FERRY_FAULTS names (comma
// separated) once.
func init() {
	var mu sync.Mutex
	left := strings.Split(os.Getenv("FERRY_FAULTS"), ",")
	injectFault = func(name string) bool {
		mu.Lock()
		defer mu.Unlock()
		i := slices.Index(left, name)
		if i < 0 {
			return false
		}
		left = slices.Delete(left, i, i+1)
		return true
	}
}
