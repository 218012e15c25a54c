package proxy

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/internal/neighbour"
	"github.com/ferry-vm/ferry/internal/testenv"
	"github.com/ferry-vm/ferry/peer"
)

// neighbourNode is a node whose socket dir QEMU's group (the neighbours'
// uid) may enter, as ferryd gives it on a host.
func neighbourNode(t *testing.T) *node {
	t.Helper()
	testenv.Root(t, "give the socket dir to QEMU's group")
	return startNodeWith(t, Config{SocketDir: filepath.Join(neighbour.SharedDir(t), "sock"),
		SocketGroup: func(context.Context) (int, error) { return neighbour.QEMUUid, nil }})
}

// A sibling QEMU (same uid, another guest) finds the target QEMU's
// listening socket by the name /proc/net/unix shows: it renamed it away
// and bound its own in its place, or connected to it first and became
// the guest's stream. The socket is moved out of every QEMU's reach as it
// appears, and the proxy hands a stream only to the guest's own QEMU; the
// real QEMU, a process of the same uid, still gets its stream.
func TestAttackSiblingQEMUTakesATargetSocket(t *testing.T) {
	src, dst := startNode(t, nil), neighbourNode(t)
	dst.in.qemu = func(path string) int {
		return neighbour.Start(t, neighbour.QEMUUid, neighbour.QEMUUid, "listen", path, "victim").Pid
	}
	prepare(t, src, dst, "m1", 0, false)
	target := TargetSocketPath(dst.dir, "m1", peer.KindMemory)
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Fatalf("the target QEMU's socket is still where every QEMU reaches it: %v", err)
	}
	sibling := neighbour.Start(t, neighbour.QEMUUid, neighbour.QEMUUid, "send", target, "sibling")
	if line, err := sibling.Line(15 * time.Second); err != nil || !strings.HasPrefix(line, "refused") {
		t.Fatalf("a sibling QEMU reached the target QEMU's socket: %q %v", line, err)
	}
	// One a sibling binds in its place is no QEMU this node started.
	neighbour.Start(t, neighbour.QEMUUid, neighbour.QEMUUid, "listen", target, "sibling")
	if got := firstBytes(t, src, dst, "m1"); got != "victim" {
		t.Fatalf("the guest's own QEMU (another uid) did not get its stream: read %q", got)
	}
}

// firstBytes opens migration id's memory stream from src, as the source
// QEMU would, and returns what the target end sends first ("" if the
// stream is closed before anything comes).
func firstBytes(t *testing.T, src, dst *node, id string) string {
	t.Helper()
	sm, err := src.p.OpenSource(id, dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close("test done")
	c, err := net.Dial("unix", sm.Paths[peer.KindMemory])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	return string(buf[:n])
}

// A sibling QEMU connects to a source socket before the guest's QEMU
// does: its bytes must never reach the target's QEMU, while the guest's
// own QEMU (another process of the same uid) is relayed.
func TestAttackSiblingQEMUFeedsASourceSocket(t *testing.T) {
	src, dst := neighbourNode(t), startNode(t, nil)
	prepareAs(t, src, dst, "m1", "vm1", 0, false)
	prepareAs(t, src, dst, "m2", "vm2", 0, false)
	// The guest's QEMU connects, through a link made once its socket is
	// there, as soon as it can.
	link := filepath.Join(neighbour.SharedDir(t), "guest.sock")
	guest := neighbour.Start(t, neighbour.QEMUUid, neighbour.QEMUUid, "send", link, "guest-bytes")
	sm, err := src.p.OpenSource("m1", dst.addr, []peer.Kind{peer.KindMemory}, guest.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close("test done")
	sibling := neighbour.Start(t, neighbour.QEMUUid, neighbour.QEMUUid, "send", sm.Paths[peer.KindMemory], "sibling-bytes")
	if line, err := sibling.Line(10 * time.Second); err != nil || line != `reply ""` {
		t.Fatalf("the sibling's connection to the source socket: %q %v (its bytes relayed to the target QEMU come back echoed)", line, err)
	}
	if rejectedOf(src, "local_peer_not_qemu") == 0 {
		t.Error("the refusal was not counted as local_peer_not_qemu")
	}

	sm2, err := src.p.OpenSource("m2", dst.addr, []peer.Kind{peer.KindMemory}, guest.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sm2.Close("test done")
	if err := os.Symlink(sm2.Paths[peer.KindMemory], link); err != nil {
		t.Fatal(err)
	}
	if line, err := guest.Line(10 * time.Second); err != nil || line != `reply "guest-bytes"` {
		t.Fatalf("the guest's own QEMU was not relayed: %q %v", line, err)
	}
	// Nothing on the source node names the target's ids.
	for _, p := range []string{sm.Paths[peer.KindMemory], sm2.Paths[peer.KindMemory]} {
		if name := filepath.Base(p); strings.Contains(name, "m1") || strings.Contains(name, "m2") {
			t.Errorf("source socket %s carries the target's id", p)
		}
	}
}

// A libvirt daemon that is no root (a session daemon) connects QEMU's
// main channel itself and hands QEMU the descriptor: it is let into the
// source socket as the guest's QEMU is, and no other process of its uid.
func TestANonRootLibvirtDaemonIsLetIntoTheSourceSocket(t *testing.T) {
	src, dst := neighbourNode(t), startNode(t, nil)
	prepareAs(t, src, dst, "m1", "vm1", 0, false)
	link := filepath.Join(neighbour.SharedDir(t), "daemon.sock")
	daemon := neighbour.Start(t, neighbour.QEMUUid, neighbour.QEMUUid, "send", link, "daemon-bytes")
	qemu := neighbour.Start(t, neighbour.QEMUUid, neighbour.QEMUUid, "send", filepath.Join(neighbour.SharedDir(t), "never.sock"), "x")
	sm, err := src.p.OpenSource("m1", dst.addr, []peer.Kind{peer.KindMemory}, qemu.Pid, daemon.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close("test done")
	if err := os.Symlink(sm.Paths[peer.KindMemory], link); err != nil {
		t.Fatal(err)
	}
	if line, err := daemon.Line(10 * time.Second); err != nil || line != `reply "daemon-bytes"` {
		t.Fatalf("the guest's libvirt daemon was not relayed: %q %v", line, err)
	}
}

// A sibling QEMU that reached a post-copy target QEMU's recovery monitor
// before ferryd hid it holds it (QEMU serves one monitor client at a
// time): the guest's recovery would time out and the guest be declared
// lost. QEMU greets no one else then; the prepare is refused, its target
// QEMU cancelled, before any of the guest comes.
func TestAttackAHeldRecoveryMonitorRefusesThePrepare(t *testing.T) {
	src, dst := startNode(t, nil), startNode(t, nil)
	dst.in.mu.Lock()
	dst.in.monitorHeld = true
	dst.in.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := src.p.Control(ctx, dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "held", Domain: "vm",
		XML: testXML, Cookie: []byte("begin"), Flags: 1, PostCopy: true, RecoverSeconds: 300})
	var ce *peer.ControlError
	if !errors.As(err, &ce) || ce.Reason != reasonPrepareFailed {
		t.Fatalf("a prepare whose monitor another process holds: %v", err)
	}
	if got := dst.in.cancels(); len(got) != 1 || got[0] != "held" {
		t.Fatalf("libvirt told to cancel %v, want the held migration", got)
	}
	// A free one is taken.
	dst.in.mu.Lock()
	dst.in.monitorHeld = false
	dst.in.mu.Unlock()
	if _, err := src.p.Control(ctx, dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "free", Domain: "vm",
		XML: testXML, Cookie: []byte("begin"), Flags: 1, PostCopy: true, RecoverSeconds: 300}); err != nil {
		t.Fatalf("a prepare whose monitor greets ferryd: %v", err)
	}
}

// A sibling QEMU that knows a migration's id before the target QEMU binds
// (a post-copy target's monitor path, with the id, is on its command line
// from exec) binds the target socket's name first, and the watch hides it.
// The guest's own QEMU, bound a moment later under the same name, was
// unlinked for the collision, and the proxy dialled the sibling's and
// refused it: the migration had nowhere to go. Each is hidden under its
// own inode, and the proxy keeps the one the guest's QEMU listens on.
func TestAttackSiblingQEMUSquatsATargetSocketsName(t *testing.T) {
	src, dst := startNode(t, nil), neighbourNode(t)
	dst.in.qemu = func(path string) int {
		return neighbour.Start(t, neighbour.QEMUUid, neighbour.QEMUUid, "listen", path, "victim").Pid
	}
	// An earlier migration gives the socket dir to QEMU's group.
	prepareAs(t, src, dst, "m0", "other", 0, false)
	target := TargetSocketPath(dst.dir, "m1", peer.KindMemory)
	neighbour.Start(t, neighbour.QEMUUid, neighbour.QEMUUid, "listen", target, "sibling")
	waitMetric(t, func() bool { return len(hiddenTargets(dst.dir, target)) == 1 })
	prepare(t, src, dst, "m1", 0, false)
	if got := firstBytes(t, src, dst, "m1"); got != "victim" {
		t.Errorf("the guest's own QEMU did not get its stream (read %q): a sibling holding the name holds the migration", got)
	}
}
