package drive

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/peer"
)

// procListAllDomains is REMOTE_PROC_CONNECT_LIST_ALL_DOMAINS.
const procListAllDomains = 273

// A Finish this node stops waiting for (a post-copy recovery took the
// migration over, a drain) no longer holds the guest: libvirt's Finish
// ends a moment later, the guest runs with no job, and a disk hot-plugged
// into it since must be seen by the next prepare's check, which asks
// libvirt again rather than take the files of the XML the guest came with.
func TestAFinishNoLongerWaitedForHoldsTheGuestNoMore(t *testing.T) {
	f := libvirtxtest.New(t, "")
	u := libvirt.UUID{4}
	f.SetDomains(libvirtxtest.Domain{Name: "a", UUID: u, ID: 3, State: int32(libvirtx.StatePaused), Reason: libvirtx.PausedMigration})
	entered, release := make(chan struct{}, 1), make(chan struct{})
	const live = `<domain type='kvm'><name>a</name><uuid>04000000-0000-0000-0000-000000000000</uuid><memory unit='GiB'>1</memory><devices>` +
		`<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='/var/lib/libvirt/images/a.raw'/><target dev='vda'/></disk>` +
		`<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='/var/lib/libvirt/images/hotplugged.raw'/><target dev='vdb'/></disk>` +
		`</devices></domain>`
	f.Answer(func(proc uint32, args []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case libvirtxtest.ProcDomainMigrateFinish3Params:
			entered <- struct{}{}
			<-release
			f.SetState("a", int32(libvirtx.StateRunning), 1) // running, migrated
			return new(libvirtxtest.XDR).Domain("a", u, 3).U32(0).Bytes(), nil, true
		case procListAllDomains:
			if binary.BigEndian.Uint32(args[len(args)-4:])&uint32(libvirt.ConnectListDomainsPersistent) != 0 {
				return new(libvirtxtest.XDR).U32(0).U32(0).Bytes(), nil, true
			}
			return new(libvirtxtest.XDR).U32(1).Domain("a", u, 3).U32(1).Bytes(), nil, true
		case libvirtxtest.ProcDomainGetXMLDesc:
			// After its Finish, with a disk hot-plugged since.
			return new(libvirtxtest.XDR).String(live).Bytes(), nil, true
		}
		return nil, nil, false
	})
	dial := func() *libvirtx.Conn {
		c, err := libvirtx.Dial(context.Background(), f.Path(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	own, pool := dial(), dial()
	in := &Target{conns: connsFunc(func(string) (*libvirtx.Conn, error) { return pool, nil }), socket: f.Path(), log: zap.NewNop(),
		memory: &fakeMemory{avail: 10 << 20, resident: map[string]uint64{}}, own: map[string]*libvirtx.Conn{"m1": own}}
	if err := in.admit("m1", "a", guestOfGiB("a", 1)); err != nil {
		t.Fatal(err)
	}
	in.noteComingFiles("m1", libvirtx.UUIDString(u), libvirtx.GuestFiles{Own: []string{"/var/lib/libvirt/images/a.raw"}})
	in.prepared("m1", 3)

	ctx, cut := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := in.Finish(ctx, peer.IncomingMigration{ID: "m1", Domain: "a", Instance: "3/" + libvirtx.UUIDString(u)}, nil, false)
		done <- err
	}()
	<-entered
	cut() // the proxy's stopFinish
	t.Logf("Ferry's Finish returned: %v", <-done)
	close(release) // libvirt's Finish ends: the guest runs, no job held
	for {
		st, _, err := pool.DomainState(context.Background(), libvirt.Domain{Name: "a", UUID: u, ID: 3})
		if err == nil && st == libvirtx.StateRunning {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)

	others, err := pool.OtherGuestsFiles(context.Background(), libvirtx.UUIDString(libvirt.UUID{9}), in.comingFiles)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(others["a"].Own, "/var/lib/libvirt/images/hotplugged.raw") {
		in.mu.Lock()
		g := in.admitted["m1"]
		in.mu.Unlock()
		t.Errorf("guest a runs, its Finish over in libvirt and no longer waited for, yet its files are taken from the XML it came with: %v "+
			"(still held for %v more); a peer's guest naming hotplugged.raw would pass the check",
			others["a"].Own, finishHeld-time.Since(g.finishing))
	}
}
