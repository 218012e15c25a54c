package metrics

import (
	"time"

	"github.com/ferry-vm/ferry/libvirtx"
)

var (
	defLibvirtUnresponsive = define(Def{Name: "ferry_libvirt_unresponsive_seconds", Type: Gauge, Area: AreaNode,
		Help:   "Seconds since the libvirt daemon behind the socket last sent anything, while ferryd holds it hung (a ping past its deadline, or nothing, not even a keepalive answer, for 15 s); 0 while it answers, and while it is down.",
		Labels: []string{"node", "socket"}})
	descLibvirtUnresponsive = defLibvirtUnresponsive.Desc()

	defLibvirtCalls = define(Def{Name: "ferry_libvirt_calls_total", Type: Counter, Area: AreaNode,
		Help:   "Calls ferryd has sent to libvirt, on every socket it watches, by operation: its load on the node's libvirt daemons (keepalive packets not counted).",
		Labels: []string{"node", "op"}})
	descLibvirtCalls = defLibvirtCalls.Desc()
)

// unresponsiveSeconds is how long a hung daemon has said nothing, 0 for
// one that answers or is down (ferry_libvirt_up says which).
func unresponsiveSeconds(s libvirtx.SocketStatus) float64 {
	if s.UnresponsiveSince.IsZero() {
		return 0
	}
	return max(time.Since(s.UnresponsiveSince).Seconds(), 0)
}
