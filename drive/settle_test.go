package drive

import (
	"errors"
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
)

// Only the target's word settles which copy lives: a success, or an answer
// naming the outcome. A transport error, a refusal for capacity or an
// unsettled outcome settles nothing, and is asked again.
func TestOnlyTheTargetsWordSettlesAFinish(t *testing.T) {
	refused := &peer.ControlError{Reason: "too_many_control_connections", Msg: "busy"}
	failed := &peer.ControlError{Msg: "Finish failed"}
	for _, c := range []struct {
		name string
		resp peer.ControlResponse
		err  error
		want string
	}{
		{"success naming the outcome", peer.ControlResponse{Outcome: peer.OutcomeRunning}, nil, peer.OutcomeRunning},
		{"plain success: libvirt's Finish returned the domain", peer.ControlResponse{}, nil, peer.OutcomeRunning},
		{"Finish failed, copy gone", peer.ControlResponse{Outcome: peer.OutcomeStopped}, failed, peer.OutcomeStopped},
		{"Finish failed, copy runs (post-copy failed there)", peer.ControlResponse{Outcome: peer.OutcomeRunning}, failed, peer.OutcomeRunning},
		{"Finish failed, post-copy split", peer.ControlResponse{Outcome: peer.OutcomeSplit}, failed, peer.OutcomeSplit},
		{"Finish failed, outcome unknown", peer.ControlResponse{}, failed, ""},
		{"refused for capacity", peer.ControlResponse{}, refused, ""},
		{"connection reset", peer.ControlResponse{}, errors.New("read: connection reset by peer"), ""},
	} {
		if got := settledOutcome(c.resp, c.err); got != c.want {
			t.Errorf("%s: settled %q, want %q", c.name, got, c.want)
		}
	}
}

// An outcome is read from the guest instance the migration's Prepare
// started, never from a domain another peer gave the same name since.
func TestOutcomesAreOfTheGuestInstancePrepared(t *testing.T) {
	uuid := libvirt.UUID{1, 2, 3}
	other := libvirt.UUID{9}
	inst := "7/" + libvirtx.UUIDString(uuid)
	for _, c := range []struct {
		name string
		dom  libvirt.Domain
		want bool
	}{
		{"the same instance, running", libvirt.Domain{ID: 7, UUID: uuid}, true},
		{"the same guest, shut off since", libvirt.Domain{ID: -1, UUID: uuid}, true},
		{"another instance of that UUID (a later start)", libvirt.Domain{ID: 8, UUID: uuid}, false},
		{"another guest of that name", libvirt.Domain{ID: 7, UUID: other}, false},
	} {
		if got := sameInstance(inst, c.dom); got != c.want {
			t.Errorf("%s: sameInstance = %v, want %v", c.name, got, c.want)
		}
	}
}
