package drive

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/ferry-vm/ferry/internal/peertext"
	"github.com/ferry-vm/ferry/peer"
)

// A ferryd from before a field reads requests strictly and refuses one
// that carries it: that refusal, as the proxy quotes it, is told apart
// from any other malformed request, so the prepare is asked again without.
func TestARefusalOfAFieldAnOlderPeerDoesNotKnowIsToldApart(t *testing.T) {
	type older struct {
		Op        string `json:"op"`
		Migration string `json:"migration"`
		Domain    string `json:"domain"`
	}
	b, err := json.Marshal(peer.ControlRequest{Op: peer.OpPrepare, Domain: "vm", LibvirtResume: true})
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	derr := dec.Decode(&older{})
	if derr == nil {
		t.Fatal("an older peer's strict read took the new field")
	}
	refusal := func(msg string) error {
		return &peer.ControlError{Target: "b", Reason: "malformed_request", Msg: peertext.Quote("control request: "+msg, 512)}
	}
	if !olderPeer(refusal(derr.Error()), "libvirtResume") {
		t.Errorf("the refusal %v is not told apart as an older peer's", refusal(derr.Error()))
	}
	for _, other := range []error{
		refusal(`json: unknown field "direct"`),
		refusal("unexpected EOF"),
		&peer.ControlError{Target: "b", Reason: "prepare_failed", Msg: peertext.Quote(`unknown field "libvirtResume"`, 512)},
	} {
		if olderPeer(other, "libvirtResume") {
			t.Errorf("%v taken for an older peer's refusal of libvirtResume", other)
		}
	}
}
