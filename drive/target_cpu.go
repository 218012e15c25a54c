package drive

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/peer"
)

// CPUHostOnly answers a dry run of a guest that sees its host's CPU as it
// is (host-passthrough, maximum): there is no model to compare.
const CPUHostOnly = "host (needs an identical CPU)"

// CompareCPU says whether this node's hypervisor offers the CPU the
// guest was started with, in libvirt's own words when it does not. A
// guest that names no CPU model gets QEMU's default for its machine, which
// any host of the same QEMU offers.
func (in *Target) CompareCPU(ctx context.Context, m peer.IncomingMigration, domXML string) (string, error) {
	canon, _, err := in.checked(m, domXML)
	if err != nil {
		return "", err
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(canon); err != nil {
		return "", fmt.Errorf("reading the checked domain XML: %w", err)
	}
	if d.CPU == nil || d.CPU.Model == nil && d.CPU.Mode == "" {
		return "default", nil
	}
	if d.CPU.Mode == "host-passthrough" || d.CPU.Mode == "maximum" {
		// No model to compare: the guest sees its host's CPU as it is,
		// and moves safely only to an identical one.
		return CPUHostOnly, nil
	}
	cpu, err := xml.Marshal(d.CPU)
	if err != nil {
		return "", err
	}
	var emulator, arch, machine string
	if d.Devices != nil {
		emulator = d.Devices.Emulator
	}
	if d.OS != nil && d.OS.Type != nil {
		arch, machine = d.OS.Type.Arch, d.OS.Type.Machine
	}
	c, err := in.conn()
	if err != nil {
		return "", err
	}
	fit, err := c.HypervisorCPU(ctx, emulator, arch, machine, d.Type, string(cpu))
	var le libvirt.Error
	switch {
	case errors.As(err, &le) && le.Code == uint32(libvirt.ErrCPUIncompatible):
		return "", &peer.Refusal{Reason: peer.ReasonCPUIncompatible, Msg: le.Message}
	case err != nil:
		return "", PeerError(err)
	}
	return string(fit), nil
}
