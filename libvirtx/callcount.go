package libvirtx

import (
	"sync"
	"sync/atomic"
)

// callCounts counts the calls this process sends to any libvirt, by
// operation: the load ferryd puts on the daemons it watches, which a node
// of launchers multiplies by their number. Keepalive packets are no calls.
var callCounts sync.Map // op string -> *atomic.Uint64

func countCall(op string) {
	n, ok := callCounts.Load(op)
	if !ok {
		n, _ = callCounts.LoadOrStore(op, new(atomic.Uint64))
	}
	n.(*atomic.Uint64).Add(1)
}

// Calls is how many calls of each operation this process has sent to
// libvirt since it started, on every connection.
func Calls() map[string]uint64 {
	out := map[string]uint64{}
	callCounts.Range(func(op, n any) bool {
		out[op.(string)] = n.(*atomic.Uint64).Load()
		return true
	})
	return out
}
