package migration_test

import (
	"fmt"
	"path/filepath"
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/migrationtest"
)

// A pod serving a libvirt of its own where the launcher glob looks sends
// events about domains it never lists: ferryd takes no more of them than
// a launcher runs. The same events on a socket named in ferryd's flags (a
// host's libvirt) are all taken.
func TestALaunchersEventsOpenNoMoreJobsThanALauncherRuns(t *testing.T) {
	const sent = 10
	for _, c := range []struct {
		name  string
		serve func(testing.TB, *migration.Tracker, *libvirtxtest.Server) *migrationtest.Feed
		want  int
	}{
		{"a socket the glob matched", migrationtest.ServeMatched, libvirtx.MaxLauncherDomains},
		{"a named socket", migrationtest.Serve, sent},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := libvirtxtest.New(t, filepath.Join(t.TempDir(), "virtqemud-sock"))
			var doms []libvirtxtest.Domain
			for i := range sent {
				// Set, never listed: shut off.
				doms = append(doms, libvirtxtest.Domain{Name: fmt.Sprintf("ns_vm%d", i), UUID: libvirt.UUID{15: byte(i)}, ID: int32(i + 1), State: int32(libvirtx.StateShutoff)})
			}
			srv.SetDomains(doms...)
			tr := migration.NewTracker(migration.Config{Node: "n1"})
			c.serve(t, tr, srv)
			for _, d := range doms {
				srv.Lifecycle(d.Name, libvirtx.EventStarted, libvirtx.StartedMigrated)
			}
			migrationtest.Wait(t, fmt.Sprintf("%d incoming jobs", c.want), func() bool { return len(tr.Jobs(true)) >= c.want })
			for range 20 {
				if n := len(tr.Jobs(true)); n > c.want {
					t.Fatalf("%d jobs from %d events, want at most %d", n, sent, c.want)
				}
			}
		})
	}
}
