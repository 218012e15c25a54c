package drive

import (
	"context"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/peer"
)

// libvirt refuses a resume's Prepare while an earlier one's connection is
// open ("already in progress"; qemuMigrationAnyCanResume): only closing
// it puts the job back to failed. A resume prepared and never finished
// (its Perform failed, its cancel lost on the link) is let go by the next
// attempt before it prepares, so the attempts after it are not refused
// for ever.
func TestAResumeNeverFinishedDoesNotHoldTheNextAttempts(t *testing.T) {
	f := libvirtxtest.New(t, "")
	uuid := libvirt.UUID{9}
	f.SetDomains(libvirtxtest.Domain{Name: "vm", UUID: uuid, ID: 3,
		State: int32(libvirtx.StateRunning), Reason: libvirtx.RunningPostCopyFailed})
	pool, err := libvirtx.Dial(context.Background(), f.Path(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	in := &Target{conns: connsFunc(func(string) (*libvirtx.Conn, error) { return pool, nil }), socket: f.Path(), log: zap.NewNop()}
	version := uint64(12_009_000)
	inProgress := func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		for _, c := range in.resumes {
			if !isClosed(c.Done()) {
				return true
			}
		}
		return false
	}
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case libvirtxtest.ProcConnectGetLibVersion:
			return new(libvirtxtest.XDR).U64(version).Bytes(), nil, true
		case libvirtxtest.ProcDomainMigratePrepare3Params:
			if inProgress() {
				return nil, &libvirt.Error{Code: uint32(libvirt.ErrOperationInvalid),
					Message: "Requested operation is not valid: resuming failed post-copy migration of domain vm already in progress"}, true
			}
			return new(libvirtxtest.XDR).String("<qemu-migration>prepare-resume</qemu-migration>").U32(0).Bytes(), nil, true
		}
		return nil, nil, false
	})
	m := peer.IncomingMigration{ID: "m-00000000000000000000000000000001", Domain: "vm",
		Instance: "3/" + libvirtx.UUIDString(uuid), PostCopy: true, LibvirtResume: true}
	resume := peer.Resume{ByLibvirt: true, Cookie: []byte("<qemu-migration>begin</qemu-migration>")}
	for attempt := 1; attempt <= 3; attempt++ {
		st, ck, err := in.Recover(context.Background(), m, "/nonexistent/r.sock", resume)
		if err != nil || st != libvirtx.QEMUMigrationPostCopyPaused || len(ck) == 0 {
			t.Fatalf("attempt %d, the ones before it never finished: %q %q %v", attempt, st, ck, err)
		}
	}
	in.mu.Lock()
	kept := len(in.resumes)
	in.mu.Unlock()
	if kept != 1 {
		t.Fatalf("%d resumes kept for one migration, want the latest only", kept)
	}
	// A libvirt upgraded into one that crashes on its own resume is not
	// asked to.
	version = 11_003_000
	if _, _, err := in.Recover(context.Background(), m, "/nonexistent/r.sock", resume); err == nil || !strings.Contains(err.Error(), "crashes") {
		t.Fatalf("a resume asked of libvirt 11.3: %v", err)
	}
}
