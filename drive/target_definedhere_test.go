package drive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/peer"
)

// libvirt's REMOTE_PROC_DOMAIN_IS_PERSISTENT.
const procDomainIsPersistent = 151

// definedHere is a libvirt holding vm shut off, persistent or not, whose
// definition is def.
func definedHere(t *testing.T, uuid libvirt.UUID, persistent bool, def string) *libvirtx.Conn {
	t.Helper()
	f := libvirtxtest.New(t, "")
	f.SetDomains(libvirtxtest.Domain{Name: "vm", UUID: uuid, ID: -1, State: int32(libvirtx.StateShutoff)})
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case procDomainIsPersistent:
			v := uint32(0)
			if persistent {
				v = 1
			}
			return libvirtxtest.Words(v), nil, true
		case libvirtxtest.ProcDomainGetXMLDesc:
			return new(libvirtxtest.XDR).String(def).Bytes(), nil, true
		}
		return nil, nil, false
	})
	c, err := libvirtx.Dial(context.Background(), f.Path(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A shut-off definition of the incoming guest's name is not taken over
// (a peer knowing a guest's name and UUID would run its own memory on
// that guest's files), unless it is the one this node kept for the guest
// when it left for that very peer, unchanged since, or the operator lets
// ferryd adopt such definitions (another guest's definition of the name
// is then libvirt's to refuse, by its UUID). A transient shut-off domain
// is gone.
func TestAShutOffDefinitionHereIsTakenOverOnlyWhenItIsTheGuestsOwn(t *testing.T) {
	uuid := libvirt.UUID{7}
	const def = "<domain type='kvm'><name>vm</name></domain>"
	m := peer.IncomingMigration{ID: "m-1", Domain: "vm", PeerNode: "b"}
	for _, c := range []struct {
		name       string
		uuid       libvirt.UUID
		persistent bool
		kept       string // the definition this node noted as kept for the guest, for b
		adopt      bool
		refused    bool
	}{
		{name: "another guest's definition of the name", uuid: libvirt.UUID{8}, persistent: true, refused: true},
		{name: "another guest's, adopting", uuid: libvirt.UUID{8}, persistent: true, adopt: true},
		{name: "the guest's definition, not kept by this node", uuid: uuid, persistent: true, refused: true},
		{name: "the guest's definition, adopting", uuid: uuid, persistent: true, adopt: true},
		{name: "the definition kept for the guest when it left for b", uuid: uuid, persistent: true, kept: def},
		{name: "a definition changed since it was kept", uuid: uuid, persistent: true, kept: def + " ", refused: true},
		{name: "a transient guest shut off", uuid: uuid},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := &Target{adoptDefined: c.adopt, stateDir: t.TempDir()}
			if c.kept != "" {
				sum := sha256.Sum256([]byte(c.kept))
				hash := hex.EncodeToString(sum[:])
				if err := noteKept(in.stateDir, drivenRecord{UUID: libvirtx.UUIDString(uuid), Domain: "vm", TargetNode: "b"}, hash); err != nil {
					t.Fatal(err)
				}
			}
			err := in.refuseDefinedHere(context.Background(), definedHere(t, c.uuid, c.persistent, def), m, libvirtx.UUIDString(uuid))
			var r *peer.Refusal
			refused := errors.As(err, &r) && r.Reason == ReasonDefinedHere
			if refused != c.refused || (err != nil && !refused) {
				t.Errorf("refused %v (%v), want %v", refused, err, c.refused)
			}
		})
	}
}
