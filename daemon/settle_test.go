package daemon

import (
	"errors"
	"testing"

	"github.com/ferry-vm/ferry/proxy"
)

// Only the target's word settles which copy lives: a success, or an answer
// naming the outcome. A transport error, a refusal for capacity or an
// unsettled outcome settles nothing, and is asked again.
func TestOnlyTheTargetsWordSettlesAFinish(t *testing.T) {
	refused := &proxy.ControlError{Reason: "too_many_control_connections", Msg: "busy"}
	failed := &proxy.ControlError{Msg: "Finish failed"}
	for _, c := range []struct {
		name string
		resp proxy.ControlResponse
		err  error
		want string
	}{
		{"success naming the outcome", proxy.ControlResponse{Outcome: proxy.OutcomeRunning}, nil, proxy.OutcomeRunning},
		{"plain success: libvirt's Finish returned the domain", proxy.ControlResponse{}, nil, proxy.OutcomeRunning},
		{"Finish failed, copy gone", proxy.ControlResponse{Outcome: proxy.OutcomeStopped}, failed, proxy.OutcomeStopped},
		{"Finish failed, copy runs (post-copy failed there)", proxy.ControlResponse{Outcome: proxy.OutcomeRunning}, failed, proxy.OutcomeRunning},
		{"Finish failed, post-copy split", proxy.ControlResponse{Outcome: proxy.OutcomeSplit}, failed, proxy.OutcomeSplit},
		{"Finish failed, outcome unknown", proxy.ControlResponse{}, failed, ""},
		{"refused for capacity", proxy.ControlResponse{}, refused, ""},
		{"connection reset", proxy.ControlResponse{}, errors.New("read: connection reset by peer"), ""},
	} {
		if got := settledOutcome(c.resp, c.err); got != c.want {
			t.Errorf("%s: settled %q, want %q", c.name, got, c.want)
		}
	}
}
