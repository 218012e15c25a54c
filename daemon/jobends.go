package daemon

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/drive"
)

// targetGrace is how long a target waits, once its side of the job has
// ended, for the source's finish or cancel before it drops the migration
// itself.
const targetGrace = 30 * time.Second

// jobFinished drops the target side's prepared migration some time after
// its job ends, so a source that cannot reach the target any more (link
// down, source crashed) does not leave it waiting for a finish.
func (d *Daemon) jobFinished(j api.Job) {
	d.reportVMI(j)
	if d.Proxy == nil || j.Role != api.RoleTarget {
		return
	}
	// Only the job's own migration, named at its prepare: one of the same
	// domain prepared since (it migrates back and forth) is another. A job
	// with no name owns nothing this proxy holds: it was not prepared
	// through it, or before a restart that emptied the proxy's registry.
	if j.IncomingID == "" {
		return
	}
	ended := []string{j.IncomingID}
	time.AfterFunc(targetGrace, func() {
		if ids := d.Proxy.Abandon(ended, "target job ended "+string(j.Phase)+" with no word from the source"); len(ids) > 0 {
			d.log.Info("incoming migrations dropped after the job", zap.String("domain", j.Domain), zap.Strings("migrations", ids))
		}
	})
}

// linkChanged records the migration interface going down or up on every
// in-flight job: evidence for whatever happens next, and part of the
// failure reason of a migration Ferry drives.
func (d *Daemon) linkChanged(up bool) {
	state, kind := "down", drive.EventLinkDown
	if up {
		state, kind = "up", drive.EventLinkUp
	}
	d.Tracker.Books().NoteAll(kind, fmt.Sprintf("%s went %s", d.cfg.MigrationInterface, state))
	d.log.Warn("migration interface changed", zap.String("interface", d.cfg.MigrationInterface), zap.String("state", state))
}
