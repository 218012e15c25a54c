package migration

import (
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// libvirt marks a source's post-copy failed when the migration's API call
// fails (its client's connection closed, the peer libvirtd unreachable)
// even while QEMU's own stream goes on; libvirt then completes the
// migration by itself. Only QEMU can say whether the stream broke, so a
// source is asked before a failure is recorded, and a VMI is marked.

// qemuAskTimeout bounds one read of QEMU's status.
const qemuAskTimeout = 5 * time.Second

// askAgain is how often QEMU is asked again while its stream goes on.
const askAgain = 2 * time.Second

// unconfirmedFailure is libvirt's word, held until QEMU's.
type unconfirmedFailure struct {
	reason string
	at     time.Time
	asked  time.Time
	// alive is QEMU's last status while its stream went on.
	alive string
}

// askQEMU holds libvirt's word that j's post-copy failed and asks QEMU;
// the caller holds t.mu.
func (t *Tracker) askQEMU(j *job, reason string, at time.Time) {
	if j.unconfirmed == nil {
		j.unconfirmed = &unconfirmedFailure{reason: reason, at: at}
		t.addEvent(j, at, "postcopy-unconfirmed", "libvirt reports the post-copy failed ("+reason+"); asking QEMU whether its stream broke")
		t.publish(j)
	}
	if time.Since(j.unconfirmed.asked) < askAgain {
		return
	}
	j.unconfirmed.asked = time.Now()
	if t.asks == nil {
		t.asks = map[string][]action{}
	}
	t.asks[j.view.Socket] = append(t.asks[j.view.Socket], action{dom: j.ref, what: askQEMU})
}

// takeAsks returns the asks for socket's sampler; the caller holds t.mu.
func (t *Tracker) takeAsks(socket string) []action {
	a := t.asks[socket]
	delete(t.asks, socket)
	return a
}

// applyQEMUStatus takes QEMU's word on a source whose post-copy libvirt
// reports failed: a stream that broke (or a QEMU that cannot be asked)
// confirms it; one that goes on leaves the job running.
func (t *Tracker) applyQEMUStatus(in input) {
	j := t.jobs[jobKey{in.socket, in.dom.Name}]
	if j == nil || j.unconfirmed == nil {
		return
	}
	u := j.unconfirmed
	switch {
	case in.err == nil && streamAlive(in.qemu):
		if u.alive != in.qemu {
			u.alive = in.qemu
			t.addEvent(j, in.got, "postcopy-unconfirmed", "QEMU's migration is "+in.qemu+": its stream goes on, and libvirt completes the migration by itself")
			t.log.Warn("libvirt reports a post-copy failed whose QEMU stream goes on", zap.String("domain", j.view.Domain), zap.String("qemu", in.qemu))
			t.publish(j)
		}
		return
	}
	why := u.reason + " (QEMU: " + in.qemu + ")"
	if in.err != nil {
		why = u.reason + " (QEMU could not be asked: " + in.err.Error() + ")"
	}
	j.qemuSaid, j.unconfirmed = true, nil
	t.finish(j, api.PhasePostCopyFailed, why, u.at)
}

// streamAlive says whether QEMU's status is a post-copy that still runs
// (or has completed): not a failure.
func streamAlive(status string) bool {
	switch status {
	case libvirtx.QEMUMigrationPostCopyActive, libvirtx.QEMUMigrationPostCopyRecover,
		libvirtx.QEMUMigrationPostCopyRecoverSet, libvirtx.QEMUMigrationCompleted:
		return true
	}
	return false
}

// askAgainAll asks QEMU again about the jobs whose stream went on, at
// each scan; the caller holds t.mu.
func (t *Tracker) askAgainAll(socket string) {
	for k, j := range t.jobs {
		// The scan's own socket: its sampler asks on its own connection.
		if k.socket == socket && j.unconfirmed != nil && j.unconfirmed.alive != "" {
			t.askQEMU(j, j.unconfirmed.reason, j.unconfirmed.at)
		}
	}
}
