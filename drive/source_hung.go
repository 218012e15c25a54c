package drive

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
)

// Kinds of the job events that say this node's libvirtd stopped answering
// the connection driving the migration, and answers again.
const (
	EventLibvirtHung    = "libvirtHung"
	EventLibvirtAnswers = "libvirtAnswers"
)

// watchHung tells the migration's job when this node's libvirtd stops
// answering the connection that drives it (libvirt's keepalive hears
// nothing), and when it answers again, until stop closes. The migration
// waits meanwhile: that connection is never cut for silence, since
// libvirt acts on a closed connection's migration once it resumes (it
// cancels a Perform, drops a finished one's job).
func (s *Source) watchHung(log *zap.Logger, conn *libvirtx.Conn, domain string, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	hung := false
	for {
		select {
		case <-stop:
			if hung {
				// Its key may outlive the drive (settled from its record).
				s.running.setHung(driveKey(conn.Socket(), domain), false)
			}
			return
		case <-tick.C:
		}
		since, silent := conn.Unresponsive()
		switch {
		case silent && !hung:
			hung = true
			s.running.setHung(driveKey(conn.Socket(), domain), true)
			log.Warn("this node's libvirtd does not answer the migration's connection; the migration waits, nothing is cut", zap.Time("lastHeard", since))
			s.books.Note(conn.Socket(), domain, EventLibvirtHung,
				fmt.Sprintf("libvirt at %s has sent nothing since %s; the migration waits for it, nothing is cut", conn.Socket(), since.Format("15:04:05")))
		case !silent && hung:
			hung = false
			s.running.setHung(driveKey(conn.Socket(), domain), false)
			log.Info("this node's libvirtd answers the migration's connection again")
			s.books.Note(conn.Socket(), domain, EventLibvirtAnswers, "libvirt answers again")
		}
	}
}
