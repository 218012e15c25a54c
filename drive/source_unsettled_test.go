package drive

import (
	"encoding/json"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/internal/testsock"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// libvirtxDomainResume is libvirt's REMOTE_PROC_DOMAIN_RESUME.
const libvirtxDomainResume = 28

// settleGuest is handoverGuest's fake, on which a resume runs the guest
// again too, and its record as this node's ferryd keeps it.
func settleGuest(t *testing.T, state, reason int32, target string, flags uint32) (*libvirtxtest.Server, *libvirtx.Conn, drivenRecord) {
	t.Helper()
	f, c, r := handoverGuest(t, state, reason)
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case libvirtxDomainDestroy:
			f.SetState("vm", int32(libvirtx.StateShutoff), int32(libvirt.DomainShutoffDestroyed))
		case libvirtxDomainResume:
			f.SetState("vm", int32(libvirtx.StateRunning), int32(libvirt.DomainRunningUnpaused))
		default:
			return nil, nil, false
		}
		return nil, nil, true
	})
	r.Socket, r.Target, r.TargetID, r.Flags, r.Started = f.Path(), target, "m-00000000000000aa", flags, time.Now()
	return f, c, r
}

// testSource is a Source with a plain-TCP proxy, a state directory and
// conns for its pool.
func testSource(t *testing.T, conns map[string]*libvirtx.Conn, recoverFor time.Duration) *Source {
	t.Helper()
	p, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", SocketDir: t.TempDir(), DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return NewSource(SourceConfig{
		Record: recordOnly(migration.Config{}),
		Conns: connsFunc(func(socket string) (*libvirtx.Conn, error) {
			if c, ok := conns[socket]; ok {
				return c, nil
			}
			return nil, os.ErrNotExist
		}),
		Proxy: p, StateDir: t.TempDir(), PostCopyRecoveryTimeout: recoverFor, Log: zap.NewNop(),
	})
}

// fakeTarget is a target's proxy port that answers every control request
// with one answer, and keeps the requests.
type fakeTarget struct {
	addr  string
	mu    sync.Mutex
	asked []peer.ControlRequest
}

func newFakeTarget(t *testing.T, answer peer.ControlResponse) *fakeTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ft := &fakeTarget{addr: ln.Addr().String()}
	go testsock.Accept(ln, func(c net.Conn) {
		var req peer.ControlRequest
		if _, err := peer.ReadHeader(c); err != nil || json.NewDecoder(c).Decode(&req) != nil {
			return
		}
		ft.mu.Lock()
		ft.asked = append(ft.asked, req)
		ft.mu.Unlock()
		json.NewEncoder(c).Encode(answer)
	})
	return ft
}

func (ft *fakeTarget) requests() []peer.ControlRequest {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return append([]peer.ControlRequest(nil), ft.asked...)
}

// nowhere is an address nothing listens on: a target whose ferryd is down.
func nowhere(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// settling runs settleUnsettled in the background; the channel closes
// when it returns.
func settling(s *Source, id string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.settleUnsettled(id)
	}()
	return done
}

func recordKept(t *testing.T, s *Source, id string) bool {
	t.Helper()
	p, ok := s.drivenPath(id)
	if !ok {
		t.Fatalf("no record path for %s", id)
	}
	_, err := os.Stat(p)
	return err == nil
}

// A drive that ended unsettled is settled from its record as a restarted
// ferryd would: the target is told the migration failed, this node's copy
// follows its word (here: the guest runs there, so the copy left paused
// here goes), and the record is forgotten. The domain's key stays its
// caller's, who ends it: settling never lets it go early.
func TestAnUnsettledDriveIsSettledFromItsRecord(t *testing.T) {
	target := newFakeTarget(t, peer.ControlResponse{Outcome: peer.OutcomeRunning})
	f, c, r := settleGuest(t, int32(libvirtx.StatePaused), int32(libvirt.DomainPausedMigration), target.addr, 0)
	s := testSource(t, map[string]*libvirtx.Conn{r.Socket: c}, 0)
	if err := s.recordDrive(r); err != nil {
		t.Fatal(err)
	}
	key := driveKey(r.Socket, r.Domain)
	s.running.start(key)
	select {
	case <-settling(s, r.ID):
	case <-time.After(5 * time.Second):
		t.Fatal("an unsettled drive whose target answers was not settled")
	}
	if n := len(f.Calls(libvirtxDomainDestroy)); n != 1 {
		t.Errorf("the copy left paused here was destroyed %d times, want once", n)
	}
	asked := target.requests()
	if len(asked) != 1 || asked[0].Op != peer.OpFinish || !asked[0].Cancelled || asked[0].Migration != r.TargetID || asked[0].Domain != "vm" {
		t.Errorf("the target was asked %+v; want one cancelled finish of %s", asked, r.TargetID)
	}
	if recordKept(t, s, r.ID) {
		t.Error("the settled migration's record was kept")
	}
	if s.running.start(key) {
		t.Error("settling let the domain's key go: its caller ends it")
	}
}

// While the target cannot say what became of the guest, the migration
// settling is in doubt under the domain's key, which its caller still
// holds: ferryctl resolve reaches it there, and its word is applied (keep
// the target: the copy left paused here goes). Keep-source would also
// start telling the unreachable target in the background, past the test.
func TestAnUnsettledDriveInDoubtTakesAnOperatorsWordThroughItsKey(t *testing.T) {
	f, c, r := settleGuest(t, int32(libvirtx.StatePaused), int32(libvirt.DomainPausedMigration), nowhere(t), 0)
	s := testSource(t, map[string]*libvirtx.Conn{r.Socket: c}, 0)
	if err := s.recordDrive(r); err != nil {
		t.Fatal(err)
	}
	key := driveKey(r.Socket, r.Domain)
	s.running.start(key)
	done := settling(s, r.ID)
	waitFor(t, "the settling in doubt", func() bool { return s.Resolve(r.Socket, "vm", peer.OutcomeRunning) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the operator's word did not settle the migration")
	}
	if d, n := len(f.Calls(libvirtxDomainDestroy)), len(f.Calls(libvirtxDomainResume)); d != 1 || n != 0 {
		t.Errorf("%d destroys and %d resumes; want the paused copy destroyed once", d, n)
	}
	if recordKept(t, s, r.ID) {
		t.Error("the settled migration's record was kept")
	}
	if s.running.start(key) {
		t.Error("settling let the domain's key go: its caller ends it")
	}
}

// A copy running here while the target runs the guest too is never
// touched on the target's word: the settling waits in doubt, its record
// kept, until an operator says which copy stays (here: this node's, which
// runs on, and the record goes).
func TestAnUnsettledDriveRunningOnBothWaitsForAnOperator(t *testing.T) {
	target := newFakeTarget(t, peer.ControlResponse{Outcome: peer.OutcomeRunning})
	f, c, r := settleGuest(t, int32(libvirtx.StateRunning), int32(libvirt.DomainRunningUnpaused), target.addr, 0)
	s := testSource(t, map[string]*libvirtx.Conn{r.Socket: c}, 0)
	if err := s.recordDrive(r); err != nil {
		t.Fatal(err)
	}
	s.running.start(driveKey(r.Socket, r.Domain))
	done := settling(s, r.ID)
	waitFor(t, "the migration shown in doubt", func() bool { return s.running.inDoubt(driveKey(r.Socket, r.Domain)) })
	select {
	case <-done:
		t.Fatal("a guest running on both nodes was settled without an operator")
	case <-time.After(500 * time.Millisecond):
	}
	touched := func() int { return len(f.Calls(libvirtxDomainDestroy)) + len(f.Calls(libvirtxDomainResume)) }
	if n := touched(); n != 0 || !recordKept(t, s, r.ID) {
		t.Fatalf("%d destroys or resumes of a copy that runs, record kept %v", n, recordKept(t, s, r.ID))
	}
	if !s.Resolve(r.Socket, r.Domain, peer.OutcomeStopped) {
		t.Fatal("ferryctl resolve could not reach a migration left for an operator")
	}
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("the operator's word did not settle it")
	}
	if n := touched(); n != 0 || recordKept(t, s, r.ID) {
		t.Errorf("kept by the operator: %d destroys or resumes, record kept %v; want neither", n, recordKept(t, s, r.ID))
	}
}

// A given-up post-copy's record is ferryctl recover's, kept while its
// guest is held; a drive ending unsettled never settles it (nor one with
// no record at all): libvirt is not even asked.
func TestAGivenUpRecordIsNotSettledAsUnsettled(t *testing.T) {
	f, c, r := settleGuest(t, int32(libvirtx.StatePaused), int32(libvirt.DomainPausedPostcopyFailed), nowhere(t), uint32(libvirt.MigratePostcopy))
	r.GivenUp = true
	s := testSource(t, map[string]*libvirtx.Conn{r.Socket: c}, time.Minute)
	if err := s.recordDrive(r); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{r.ID, "m-00000000000000ff"} {
		select {
		case <-settling(s, id):
		case <-time.After(2 * time.Second):
			t.Fatalf("settleUnsettled(%s) took on a migration it must leave", id)
		}
	}
	if n := len(f.Calls(libvirtxtest.ProcDomainLookupByName)); n != 0 {
		t.Errorf("libvirt was asked for the guest %d times", n)
	}
	if kept, ok := s.recordedDrive(r.ID); !ok || !kept.GivenUp {
		t.Errorf("the given-up record: %+v, %v; want it kept, given up", kept, ok)
	}
}
