package libvirtx

import (
	"context"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// DirtyRateMode is how QEMU measures a guest's dirty rate without
// migrating it (virDomainDirtyRateCalcFlags).
type DirtyRateMode string

const (
	// DirtyRatePageSampling hashes a sample of pages at the start and the
	// end of the period: it needs nothing of the host and works under TCG.
	DirtyRatePageSampling DirtyRateMode = "page-sampling"
	// DirtyRateBitmap and DirtyRateRing count every dirtied page through
	// KVM's dirty log or its dirty ring; they need KVM, and the ring needs
	// the guest started with it.
	DirtyRateBitmap DirtyRateMode = "dirty-bitmap"
	DirtyRateRing   DirtyRateMode = "dirty-ring"
)

func (m DirtyRateMode) flags() uint32 {
	switch m {
	case DirtyRateBitmap:
		return uint32(libvirt.DomainDirtyrateModeDirtyBitmap)
	case DirtyRateRing:
		return uint32(libvirt.DomainDirtyrateModeDirtyRing)
	}
	return uint32(libvirt.DomainDirtyrateModePageSampling)
}

// maxDirtyRatePeriod is libvirt's own bound on a measurement's period,
// in seconds.
const maxDirtyRatePeriod = 60

func knownMode(m DirtyRateMode) bool {
	return m == DirtyRatePageSampling || m == DirtyRateBitmap || m == DirtyRateRing
}

// DirtyRate is libvirt's last dirty-rate measurement of a domain (its
// "dirtyrate" stats group).
type DirtyRate struct {
	// Measured is set once a measurement has ended; Measuring while one
	// runs. (Its start time is not read: QEMU before 8.2 gives it in
	// seconds since the host booted, later ones in wall-clock time.)
	Measured, Measuring bool
	Period              time.Duration
	// BytesPerSecond is QEMU's figure, which it gives in MiB/s.
	BytesPerSecond uint64
	Mode           DirtyRateMode
}

// StartDirtyRate has QEMU measure the domain's dirty rate over period; the
// result is read with DirtyRate once it has passed.
func (c *Conn) StartDirtyRate(ctx context.Context, dom libvirt.Domain, period time.Duration, mode DirtyRateMode) error {
	secs := max(int32(period/time.Second), 1)
	return do(ctx, c, "start dirty rate calc", func(l *libvirt.Libvirt) error {
		return l.DomainStartDirtyRateCalc(dom, secs, mode.flags())
	})
}

// DirtyRate reads the domain's last dirty-rate measurement.
func (c *Conn) DirtyRate(ctx context.Context, dom libvirt.Domain) (DirtyRate, error) {
	return call(ctx, c, "dirty rate", func(l *libvirt.Libvirt) (DirtyRate, error) {
		recs, err := l.ConnectGetAllDomainStats([]libvirt.Domain{dom}, uint32(libvirt.DomainStatsDirtyrate), 0)
		if err != nil || len(recs) == 0 {
			return DirtyRate{}, err
		}
		return DecodeDirtyRate(recs[0].Params), nil
	})
}

// DecodeDirtyRate reads the "dirtyrate" stats group's typed parameters.
func DecodeDirtyRate(params []libvirt.TypedParam) DirtyRate {
	var r DirtyRate
	for _, p := range params {
		u, _ := paramUint(p.Value.I)
		switch p.Field {
		case libvirt.DomainStatsDirtyrateCalcStatus:
			r.Measuring = u == uint64(libvirt.DomainDirtyrateMeasuring)
			r.Measured = u == uint64(libvirt.DomainDirtyrateMeasured)
		case libvirt.DomainStatsDirtyrateCalcPeriod:
			r.Period = time.Duration(min(u, maxDirtyRatePeriod)) * time.Second
		case libvirt.DomainStatsDirtyrateMegabytesPerSecond:
			r.BytesPerSecond = u << 20
		case libvirt.DomainStatsDirtyrateCalcMode:
			// Only a mode libvirt has: the string is kept with every
			// measurement, and a launcher's libvirt is a pod's.
			if s, ok := p.Value.I.(string); ok && knownMode(DirtyRateMode(s)) {
				r.Mode = DirtyRateMode(s)
			}
		}
	}
	return r
}
