package proxy

import (
	"context"
	"encoding/hex"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/internal/neighbour"
	"github.com/ferry-vm/ferry/internal/testenv"
	"github.com/ferry-vm/ferry/peer"
	"golang.org/x/sys/unix"
)

// An unprivileged user on the source node (its address is the node's)
// holds more idle connections to the target's proxy than one address may
// have in their handshake, opening each again as soon as it is closed.
// The node's ferryd still prepares and cancels, on new connections as a
// finish is: a finish refused would
// leave the guest paused in doubt for as long as the user goes on.
func TestAttackALocalUserCannotCrowdOutItsNodesFerryd(t *testing.T) {
	src, dst := startNode(t, nil), startNode(t, nil)
	neighbour.Start(t, neighbour.LocalUser, neighbour.LocalUser, "hold", dst.addr, strconv.Itoa(2*MaxOpeningPerAddr))
	waitMetric(t, func() bool { return dst.p.openingCount() >= MaxOpeningPerAddr })
	for i := range 10 {
		id := "m" + strconv.Itoa(i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := src.p.Control(ctx, dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: id, Domain: "vm" + strconv.Itoa(i), XML: testXML})
		if err == nil {
			_, err = src.p.Control(ctx, dst.addr, peer.ControlRequest{Op: peer.OpCancel, Migration: id, Domain: "vm" + strconv.Itoa(i)})
		}
		cancel()
		if err != nil {
			t.Fatalf("attempt %d of 10, with a local user's idle connections held: %v", i+1, err)
		}
	}
	if n := rejectedOf(dst, reasonTooManyOpening); n == 0 {
		t.Error("the local user's connections were never closed for room")
	}
	if ta, ok := dialedFrom(t, src, dst); ok && ta.Port >= 1024 {
		t.Errorf("ferryd dialed its peer from port %d, not a reserved one", ta.Port)
	}
}

// dialedFrom is the local address src's proxy dials dst from.
func dialedFrom(t *testing.T, src, dst *node) (*net.TCPAddr, bool) {
	t.Helper()
	c, err := src.p.dialTCP(context.Background(), dst.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ta, ok := c.LocalAddr().(*net.TCPAddr)
	return ta, ok
}

// With the proxy on plain TCP, a target's migration ids show in its
// /proc/net/unix: an unprivileged user of the target node cancelled a
// migration by its id. Over plain TCP a migration is bound to the address
// it was prepared from, and the source node, which shares that address,
// names no socket by the target's id.
func TestAttackALocalUserCannotCancelAPlainMigrationByItsID(t *testing.T) {
	src, dst := startNode(t, nil), startNode(t, nil)
	prepare(t, src, dst, "plainid", 0, false)
	hb, _ := peer.Header{Kind: peer.KindControl}.Encode()
	req := append(hb, `{"op":"cancel","migration":"plainid","domain":"vm"}`+"\n"...)
	// On the target node (127.0.0.2 here; the source is 127.0.0.1).
	user := neighbour.Start(t, neighbour.LocalUser, neighbour.LocalUser, "tcpsend", dst.addr, hex.EncodeToString(req), "127.0.0.2")
	line, err := user.Line(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := dst.in.cancels(); len(got) != 0 {
		t.Fatalf("a local user cancelled the migration by its id (%s): libvirt was told to cancel %v", line, got)
	}
	if !strings.Contains(line, `\"error\"`) {
		t.Errorf("the local user's cancel was answered %s, not refused", line)
	}
	// Its own source still cancels it.
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpCancel, Migration: "plainid", Domain: "vm"}); err != nil {
		t.Fatalf("the source's own cancel: %v", err)
	}
	if got := dst.in.cancels(); len(got) != 1 {
		t.Fatalf("libvirt told to cancel %v after the source's cancel", got)
	}
}

// ferryd's source ports to one peer run out only once every port of the
// range is in use towards it, each tried once; then it dials from an
// ephemeral port rather than fail.
func TestEveryReservedPortIsTriedBeforeAnEphemeralOne(t *testing.T) {
	testenv.Root(t, "bind reserved source ports")
	src, dst := startNode(t, nil), startNode(t, nil)
	seen := map[int]bool{}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range reservedPortHigh - reservedPortLow + 1 {
		c, err := src.p.dialTCP(context.Background(), dst.addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		port := c.LocalAddr().(*net.TCPAddr).Port
		if port < reservedPortLow || port > reservedPortHigh || seen[port] {
			t.Fatalf("connection %d came from port %d (seen before: %v)", len(held), port, seen[port])
		}
		seen[port] = true
	}
	c, err := src.p.dialTCP(context.Background(), dst.addr)
	if err != nil {
		t.Fatalf("with every reserved port in use: %v", err)
	}
	defer c.Close()
	if port := c.LocalAddr().(*net.TCPAddr).Port; port < 1024 {
		t.Errorf("a connection past the range came from port %d", port)
	}
}

// A ferryd that may not bind a reserved port (no CAP_NET_BIND_SERVICE, as
// a unit that drops it runs) dials its peer from an ephemeral port: its
// first dial returned no connection and no error, and the caller crashed
// on it. Capabilities are a thread's own, so this test's thread drops it
// and the dial runs there.
func TestAPeerIsDialledWithoutTheRightToBindAReservedPort(t *testing.T) {
	if b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start"); strings.TrimSpace(string(b)) != "" {
		if start, _ := strconv.Atoi(strings.TrimSpace(string(b))); start <= reservedPortHigh {
			t.Skipf("net.ipv4.ip_unprivileged_port_start is %d here: every process may bind the reserved range", start)
		}
	}
	src, dst := startNode(t, nil), startNode(t, nil)
	runtime.LockOSThread() // never unlocked: the thread ends with the test
	dropBindService(t)
	for i := range 2 {
		c, err := src.p.dialTCP(context.Background(), dst.addr)
		if err != nil || c == nil {
			t.Fatalf("dial %d without the right to bind a reserved port: %v, %v", i+1, c, err)
		}
		port := c.LocalAddr().(*net.TCPAddr).Port
		c.Close()
		if port < 1024 {
			t.Fatalf("dial %d came from port %d, reserved, without the right to bind one", i+1, port)
		}
	}
	if !src.p.noReservedPorts.Load() {
		t.Error("the proxy goes on trying reserved ports it may not bind")
	}
}

// dropBindService takes CAP_NET_BIND_SERVICE out of this thread's
// effective set.
func dropBindService(t *testing.T) {
	t.Helper()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	data[0].Effective &^= 1 << unix.CAP_NET_BIND_SERVICE
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
}
