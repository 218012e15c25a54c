package drive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
)

// A libvirtd that answered with an error refuses as libvirt; one that did
// not answer at all is this node's hypervisor being away.
func TestPeerErrorTellsAnAbsentLibvirtFromARefusingOne(t *testing.T) {
	gone := &libvirtx.CallError{Op: "Prepare", Socket: "/run/libvirt/libvirt-sock", Err: io.ErrUnexpectedEOF}
	var r *peer.Refusal
	if err := PeerError(gone); !errors.As(err, &r) || r.Reason != ReasonLibvirtUnavailable || strings.Contains(r.Msg, "/run/") {
		t.Errorf("connection lost: got %#v, want a %s refusal that names no path", err, ReasonLibvirtUnavailable)
	}
	said := &libvirtx.CallError{Op: "Prepare", Socket: "/run/libvirt/libvirt-sock", Err: libvirt.Error{Code: uint32(libvirt.ErrOperationFailed), Message: "no"}}
	if err := PeerError(said); errors.As(err, &r) || strings.Contains(err.Error(), "/run/") {
		t.Errorf("libvirt's own error: got %#v, want it passed on without the socket path", err)
	}
	for _, slow := range []error{libvirtx.ErrTimeout, errors.New("xdr: decoding a reply")} {
		late := &libvirtx.CallError{Op: "Prepare", Socket: "/run/libvirt/libvirt-sock", Err: slow}
		if err := PeerError(late); errors.As(err, &r) {
			t.Errorf("%v: got %#v, want no unavailable refusal", slow, err)
		}
	}
	for _, cut := range []error{libvirt.ErrInterrupted, syscall.EINVAL} {
		gone := &libvirtx.CallError{Op: "Prepare", Socket: "/run/libvirt/libvirt-sock", Err: cut}
		if err := PeerError(gone); !errors.As(err, &r) || r.Reason != ReasonLibvirtUnavailable {
			t.Errorf("%v: got %#v, want a %s refusal", cut, err, ReasonLibvirtUnavailable)
		}
	}
}

// Only a finish that found nobody at the target's proxy, or a proxy that
// never heard of the migration, says the target lost it.
func TestTargetLostOnlyFromAGoneOrForgetfulProxy(t *testing.T) {
	refused := fmt.Errorf("dial target proxy 10.77.0.2:9475: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"finish answered", nil, ""},
		{"nothing listens", refused, "nothing listening"},
		{"restarted", &peer.ControlError{Target: "10.77.0.2:9475", Reason: peer.ReasonUnknownMigration, Msg: "migration m-1 is not known on this node"}, "restarted"},
		{"another refusal", &peer.ControlError{Target: "10.77.0.2:9475", Reason: "wrong_state", Msg: "unknown migration, says the peer"}, ""},
		{"timed out", fmt.Errorf("control answer from 10.77.0.2:9475: %w", context.DeadlineExceeded), ""},
	}
	for _, c := range cases {
		got := targetLost(c.err)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: targetLost = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestCPUListIsCounted(t *testing.T) {
	for list, want := range map[string]uint{"0-3,8,10-11\n": 7, "0": 1, "0-127": 128} {
		if n, ok := countCPUList(list); !ok || n != want {
			t.Errorf("%q: %d %v, want %d", list, n, ok, want)
		}
	}
	for _, bad := range []string{"", "3-1", "a-b"} {
		if _, ok := countCPUList(bad); ok {
			t.Errorf("%q counted", bad)
		}
	}
}

// The proxy checks a peer's XML in the peer's turn and hands the result to
// Prepare, which does not check it again outside that turn (a second
// check let one peer hold both of the node's checks at once).
func TestPrepareTakesTheCheckMadeInThePeersTurn(t *testing.T) {
	in := &Target{}
	m := peer.IncomingMigration{Domain: "vm", Checked: &peer.CheckedXML{Live: "<domain>checked</domain>", Config: "<domain>kept</domain>"}}
	live, config, err := in.checked(m, "<not even XML")
	if err != nil || live != m.Checked.Live || config != m.Checked.Config {
		t.Fatalf("checked: %q, %q, %v; want the proxy's check", live, config, err)
	}
	m.Checked = nil
	if _, _, err := in.checked(m, "<not even XML"); err == nil {
		t.Fatal("without the proxy's check, the XML was taken unchecked")
	}
}
