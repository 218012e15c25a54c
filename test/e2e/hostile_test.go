//go:build e2e

package e2e

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ferry-vm/ferry/test/testbed"
)

// hostileLibvirt plants what any pod can: an emptyDir named
// libvirt-runtime with a socket named virtqemud-sock, in the node's kubelet
// pods directory. It answers the handshake as libvirtd does, then answers
// the domain listing with 16 bytes claiming 2^31-1 records, which
// go-libvirt would allocate (about 137 GB) before reading any. It returns
// the socket's path as the node sees it and how many listings it answered.
func hostileLibvirt(t *testing.T, node string) (string, *atomic.Int32) {
	t.Helper()
	pod := uuid.NewString()
	rel := filepath.Join(pod, "volumes", "kubernetes.io~empty-dir", "libvirt-runtime", "virtqemud-sock")
	host := filepath.Join(bed.Node(node).Dir, "kubelet", "pods", rel)
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(bed.Node(node).Dir, "kubelet", "pods", pod)) })
	// Bound at a short path, then moved: the inode is what a dial reaches.
	short := filepath.Join(t.TempDir(), "h")
	ln, err := net.Listen("unix", short)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	t.Cleanup(func() { ln.Close() })
	if err := os.Rename(short, host); err != nil {
		t.Fatal(err)
	}
	var listings atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveHostile(c, &listings)
		}
	}()
	return "/var/lib/kubelet/pods/" + rel, &listings
}

func serveHostile(c net.Conn, listings *atomic.Int32) {
	defer c.Close()
	be := func(vs ...uint32) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.BigEndian.AppendUint32(b, v)
		}
		return b
	}
	for {
		var hdr [28]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		size := binary.BigEndian.Uint32(hdr[0:4])
		proc, serial := binary.BigEndian.Uint32(hdr[12:16]), binary.BigEndian.Uint32(hdr[20:24])
		if _, err := io.CopyN(io.Discard, c, int64(size)-28); err != nil {
			return
		}
		var body []byte
		switch proc {
		case 66: // auth list: none
			body = be(1, 0)
		case 7: // capabilities: an empty document
			body = be(0)
		case 157: // lib version
			body = be(0, 11003000)
		case 60: // supports feature (keepalive): no
			body = be(0)
		case 316: // event callback registered
			body = be(1)
		case 344: // all domain stats: 2^31-1 records, none sent
			listings.Add(1)
			body = be(0x7fffffff, 0, 0, 0)
		}
		out := be(uint32(28+len(body)), 0x20008086, 1, proc, 1, serial, 0)
		if _, err := c.Write(append(out, body...)); err != nil {
			return
		}
	}
}

// A pod's socket that speaks hostile XDR is refused and named, and ferryd
// goes on serving the launchers beside it.
func testHostileSocket(t *testing.T, launcher *testbed.Launcher) {
	pid := bed.FerrydPID("a")
	sock, listings := hostileLibvirt(t, "a")
	var last string
	waitFor(t, "the hostile socket refused, with the reason", 30*time.Second, func() bool {
		var doms struct {
			Libvirt []struct {
				Socket    string `json:"socket"`
				Up        bool   `json:"up"`
				LastError string `json:"lastError"`
			} `json:"libvirt"`
		}
		ctlJSON(t, "a", &doms, "domains")
		for _, s := range doms.Libvirt {
			if s.Socket == sock {
				last = s.LastError
				return !s.Up && strings.Contains(s.LastError, "libvirt packet refused") && strings.Contains(s.LastError, "2147483647")
			}
		}
		return false
	})
	t.Logf("the hostile socket's status: %s", last)
	if listings.Load() == 0 {
		t.Fatal("ferryd never asked the hostile socket for its domains: the test proves nothing")
	}
	if now := bed.FerrydPID("a"); now != pid {
		t.Fatalf("ferryd on node a restarted (pid %d, then %d): the hostile reply crashed it", pid, now)
	}
	// The real launcher beside it is still served.
	var doms struct {
		Libvirt []struct {
			Socket string `json:"socket"`
			Up     bool   `json:"up"`
		} `json:"libvirt"`
	}
	ctlJSON(t, "a", &doms, "domains")
	up := false
	for _, s := range doms.Libvirt {
		up = up || s.Socket == launcher.Socket && s.Up
	}
	if !up {
		t.Errorf("the real launcher's socket is not served beside the hostile one: %+v", doms.Libvirt)
	}
}
