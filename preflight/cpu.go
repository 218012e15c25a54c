package preflight

import (
	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
)

func cpuReasons(def *libvirtxml.Domain) []api.Blocker {
	cpu := def.CPU
	if cpu == nil {
		return nil
	}
	var out []api.Blocker
	// host-model needs nothing: in the live XML libvirt has already
	// written it out as a named model the target can be checked against.
	hostCPU := cpu.Mode == "host-passthrough" || cpu.Mode == "maximum"
	if !tscFrequencySet(def) {
		switch {
		case requiresInvTSC(cpu):
			out = append(out, blocker(CodeCPUInvTSC, "", "",
				"The guest's CPU has invariant TSC (invtsc) and no TSC frequency is set: QEMU cannot promise the guest the same TSC rate on another host and refuses to migrate it (set <timer name='tsc' frequency=...> to allow it)."))
		case hostCPU && cpu.Migratable == "off" && x86(def):
			out = append(out, blocker(CodeCPUInvTSC, "", "",
				"The guest's CPU is %s with migratable='off', which hands it invariant TSC (invtsc) wherever the host has it, as nearly every x86 server does, and no TSC frequency is set: QEMU then refuses to migrate it.", cpu.Mode))
		}
	}
	if hostCPU {
		out = append(out, blocker(CodeCPUHost, "", "",
			"The guest sees this host's CPU as it is (%s): it can move only to a host with an identical CPU running the same microcode and kernel, or it may fault or misbehave after the move.", cpu.Mode))
	}
	return out
}

// requiresInvTSC follows libvirt, which refuses a CPU definition that
// turns invtsc on; optional turns it on wherever the host has it.
func requiresInvTSC(cpu *libvirtxml.DomainCPU) bool {
	for _, f := range cpu.Features {
		if f.Name != "invtsc" {
			continue
		}
		switch f.Policy {
		case "", "require", "force", "optional":
			return true
		}
	}
	return false
}

// tscFrequencySet: with the frequency fixed QEMU can hold the guest's TSC
// rate on any host, and invtsc no longer pins the guest to this one.
func tscFrequencySet(def *libvirtxml.Domain) bool {
	if def.Clock == nil {
		return false
	}
	for _, t := range def.Clock.Timer {
		if t.Name == "tsc" && t.Frequency > 0 {
			return true
		}
	}
	return false
}

func x86(def *libvirtxml.Domain) bool {
	if def.OS == nil || def.OS.Type == nil {
		return false
	}
	switch def.OS.Type.Arch {
	case "x86_64", "i686":
		return true
	}
	return false
}
