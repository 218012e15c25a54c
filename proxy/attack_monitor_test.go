package proxy

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

// A QEMU of the node's QEMU user reads a victim migration's id from the
// victim QEMU's command line, and, once ferryd has hidden the victim's
// monitor, binds a socket of the same name in the socket dir. The watcher
// renames it over the victim's hidden monitor: the victim QEMU's only
// reachable monitor is unlinked, so its broken post-copy can never be
// resumed (and ferryd's monitor path now leads to the attacker).
func TestAttackStrayMonitorReplacesAHiddenOne(t *testing.T) {
	n := startNode(t, nil)
	dir := n.p.cfg.SocketDir
	id := "vict"
	name := id + "-qmp.sock"
	hidden := filepath.Join(dir, monitorDirName, name)

	// The victim's target QEMU made its monitor; ferryd hid it.
	victim, err := net.Listen("unix", filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	victim.(*net.UnixListener).SetUnlinkOnClose(false)
	defer victim.Close()
	waitLstat(t, hidden)
	var vst os.FileInfo
	if vst, err = os.Lstat(hidden); err != nil {
		t.Fatal(err)
	}
	// The victim QEMU answers at the hidden path.
	go func() {
		for {
			c, err := victim.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("victim"))
			c.Close()
		}
	}()

	// The attacker binds the same name in the socket dir.
	attacker, err := net.Listen("unix", filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	attacker.(*net.UnixListener).SetUnlinkOnClose(false)
	defer attacker.Close()
	go func() {
		for {
			c, err := attacker.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("attacker"))
			c.Close()
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Lstat(filepath.Join(dir, name)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stray was not handled within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, err := os.Lstat(hidden)
	if err != nil {
		t.Fatalf("hidden monitor gone: %v", err)
	}
	if !os.SameFile(st, vst) {
		c, err := net.Dial("unix", hidden)
		who := ""
		if err != nil {
			who = err.Error()
		} else {
			b := make([]byte, 16)
			k, _ := c.Read(b)
			who = string(b[:k])
			c.Close()
		}
		t.Fatalf("the victim's hidden monitor was replaced by a stray socket of the same name; the hidden path now answers as %q", who)
	}
}

func waitLstat(t *testing.T, p string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Lstat(p); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within 5 s", p)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The prepare's own hideMonitor renames whatever socket is at the
// monitor's path over the hidden one. When the watcher has hidden the
// target QEMU's monitor already (it does so the instant QEMU binds it), a
// QEMU that read the id off the new QEMU's command line binds the path
// again before libvirt's Prepare returns; hideMonitor then moves that
// socket over the real monitor (the watcher's NOREPLACE, if any, does not
// cover this rename).
func TestAttackPrepareHideMonitorReplacesTheRealOne(t *testing.T) {
	dir := t.TempDir()
	p, err := New(Config{Listen: "127.0.0.1:0", SocketDir: dir, DialTimeout: time.Second, Metrics: testMetrics()})
	if err != nil {
		t.Fatal(err)
	}
	id := "vict"
	in := peer.IncomingMigration{ID: id, Domain: "vm", PostCopy: true, MonitorPath: TargetMonitorPath(dir, id)}
	hidden := HiddenMonitorPath(dir, id)
	real, err := net.Listen("unix", in.MonitorPath)
	if err != nil {
		t.Fatal(err)
	}
	real.(*net.UnixListener).SetUnlinkOnClose(false)
	defer real.Close()
	// The watcher's move.
	hideQEMUSocket(dir, in.MonitorPath, p.log)
	vst, err := os.Lstat(hidden)
	if err != nil {
		t.Fatal(err)
	}
	attacker, err := net.Listen("unix", in.MonitorPath)
	if err != nil {
		t.Fatal(err)
	}
	attacker.(*net.UnixListener).SetUnlinkOnClose(false)
	defer attacker.Close()
	p.hideMonitor(in)
	st, err := os.Lstat(hidden)
	if err != nil || !os.SameFile(st, vst) {
		t.Fatalf("the prepare's hideMonitor replaced the target QEMU's hidden monitor with another socket (err %v)", err)
	}
}
