package drive

import (
	"context"
	"fmt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
)

// ReasonDefinedHere refuses a migration in of a guest this node holds
// defined and shut off.
const ReasonDefinedHere = peer.ReasonDefinedHere

// refuseDefinedHere refuses an incoming guest whose name this node's
// libvirt holds as a shut-off persistent domain, unless the operator lets
// ferryd adopt such definitions. libvirt's Prepare takes it over (the same
// name and UUID), and its Finish replaces the definition with the peer's:
// a peer that knows a shut-off guest's name and UUID would run memory of
// its own on that guest's disks, and read them. A guest Ferry moves
// leaves no definition behind (see definition.go); one left by
// `virsh migrate --persistent` without --undefinesource, or defined on
// every node by an operator, is what the switch is for.
func (in *Target) refuseDefinedHere(ctx context.Context, c *libvirtx.Conn, m peer.IncomingMigration, uuid string) error {
	if in.adoptDefined {
		return nil
	}
	dom, err := c.LookupDomain(ctx, m.Domain)
	if libvirtx.IsNoDomain(err) {
		return nil
	}
	if err != nil {
		return PeerError(err)
	}
	if got := libvirtx.UUIDString(dom.UUID); got != uuid {
		// libvirt refuses it too; said here in Ferry's words.
		return &peer.Refusal{Reason: ReasonDefinedHere, Msg: fmt.Sprintf("domain %s is defined on this node as another guest (UUID %s, not %s)", m.Domain, got, uuid)}
	}
	persistent, err := c.Persistent(ctx, dom)
	if err != nil {
		return PeerError(err)
	}
	if !persistent {
		// Transient and shut off is gone; one that runs is refused
		// before this.
		return nil
	}
	if hash, err := definitionHash(ctx, c, dom); err == nil && keptFor(in.stateDir, uuid, m.PeerNode, hash) {
		// The definition this node kept for the guest when it left for
		// that node, as it was kept, is the guest's own.
		return nil
	}
	return &peer.Refusal{Reason: ReasonDefinedHere, Msg: fmt.Sprintf("domain %s is defined on this node, shut off: a migration in would run the peer's guest on its definition and files; "+
		"undefine it here (virsh undefine --keep-nvram --keep-tpm %s; its disks stay) or start ferryd with --migration-adopt-defined", m.Domain, m.Domain)}
}

// AdoptDefinedGuests lets incoming migrations take over a shut-off
// definition of their name on this node (see refuseDefinedHere).
func (in *Target) AdoptDefinedGuests() { in.adoptDefined = true }

// KeepStateIn is the state dir where this node's sources note the
// definitions they kept for their guests (see kept.go).
func (in *Target) KeepStateIn(dir string) { in.stateDir = dir }
