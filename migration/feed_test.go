package migration

import (
	"time"

	"github.com/ferry-vm/ferry/libvirtx"
)

// feedStats, feedDomains and feedEnded feed recorded inputs
// exactly as the sampler and the event loop feed what they read from
// libvirt, at the times a test chooses; the reads they would ask for next
// are not made. Tests outside this package feed a tracker through a fake
// libvirt (libvirtx/libvirtxtest) and its real sampler instead.
func (t *Tracker) feedStats(socket string, d libvirtx.Domain, s libvirtx.JobStats, at time.Time) {
	t.apply(input{kind: inStats, socket: socket, dom: d.Ref, at: at, got: at, stats: s})
}

// feedDomains feeds one listing of a socket's active domains (see feedStats).
func (t *Tracker) feedDomains(socket string, doms []libvirtx.Domain, at time.Time) {
	t.apply(input{kind: inList, socket: socket, at: at, got: at, list: doms})
}

// feedEnded feeds the completed-job statistics and state read after a
// domain's libvirt job went away (see feedStats).
func (t *Tracker) feedEnded(socket string, d libvirtx.Domain, done libvirtx.JobStats, at time.Time) {
	t.apply(input{kind: inEnded, socket: socket, dom: d.Ref, at: at, got: at, stats: done, state: d.State, reason: d.Reason})
}
