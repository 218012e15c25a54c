package libvirtx

import (
	"context"

	libvirt "github.com/digitalocean/go-libvirt"
)

// BlockSize is a disk's size as libvirt sees it: what the guest sees
// (capacity) and what it takes on the host (physical).
type BlockSize struct {
	Capacity, Physical uint64
}

// BlockSize asks libvirt the size of the domain's disk named by its
// target (vda) or source path.
func (c *Conn) BlockSize(ctx context.Context, dom libvirt.Domain, disk string) (BlockSize, error) {
	return call(ctx, c, "block info", func(l *libvirt.Libvirt) (BlockSize, error) {
		_, capacity, physical, err := l.DomainGetBlockInfo(dom, disk, 0)
		return BlockSize{Capacity: capacity, Physical: physical}, err
	})
}

// CPUFit is how a guest CPU compares with what this host's hypervisor
// can give it.
type CPUFit string

const (
	CPUIdentical    CPUFit = "identical"
	CPUSuperset     CPUFit = "superset"
	CPUIncompatible CPUFit = "incompatible"
)

// HypervisorCPU says whether this host's hypervisor can run a guest CPU
// (virConnectCompareHypervisorCPU). The other arguments name the
// hypervisor as the domain does (emulator, arch, machine, virt type);
// empty ones are libvirt's defaults. An incompatible CPU comes back as
// libvirt's own error, which names what is missing.
func (c *Conn) HypervisorCPU(ctx context.Context, emulator, arch, machine, virtType, cpuXML string) (CPUFit, error) {
	opt := func(s string) libvirt.OptString {
		if s == "" {
			return nil
		}
		return libvirt.OptString{s}
	}
	r, err := call(ctx, c, "compare hypervisor cpu", func(l *libvirt.Libvirt) (int32, error) {
		return l.ConnectCompareHypervisorCPU(opt(emulator), opt(arch), opt(machine), opt(virtType), cpuXML,
			uint32(libvirt.ConnectCompareCPUFailIncompatible))
	})
	switch libvirt.CPUCompareResult(r) {
	case libvirt.CPUCompareIdentical:
		return CPUIdentical, err
	case libvirt.CPUCompareSuperset:
		return CPUSuperset, err
	}
	return CPUIncompatible, err
}

// ResidentBytes is how much of the guest's memory QEMU holds in RAM (its
// process's resident set, QEMU's own memory included): pages a guest never
// touched are not resident, and a migration sends them as zero pages, at
// next to no cost.
func (c *Conn) ResidentBytes(ctx context.Context, dom libvirt.Domain) (uint64, error) {
	return call(ctx, c, "memory stats", func(l *libvirt.Libvirt) (uint64, error) {
		stats, err := l.DomainMemoryStats(dom, uint32(libvirt.DomainMemoryStatNr), 0)
		for _, s := range stats {
			if s.Tag == int32(libvirt.DomainMemoryStatRss) {
				return s.Val << 10, err
			}
		}
		return 0, err
	})
}

// SetMaxSpeed caps the domain's migration at mibs MiB/s, while it runs.
func (c *Conn) SetMaxSpeed(ctx context.Context, dom libvirt.Domain, mibs uint64) error {
	return do(ctx, c, "set max migration speed", func(l *libvirt.Libvirt) error {
		return l.DomainMigrateSetMaxSpeed(dom, mibs, 0)
	})
}

// MaxSpeed is the domain's migration bandwidth cap in MiB/s, which libvirt
// keeps for the domain's next migration too.
func (c *Conn) MaxSpeed(ctx context.Context, dom libvirt.Domain) (uint64, error) {
	return call(ctx, c, "max migration speed", func(l *libvirt.Libvirt) (uint64, error) {
		return l.DomainMigrateGetMaxSpeed(dom, 0)
	})
}
