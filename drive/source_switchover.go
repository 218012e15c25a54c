package drive

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

const (
	// switchoverHistory is how many of the last migrations to a node, and
	// switchoverAge how old, may speak for its path.
	switchoverHistory = 5
	switchoverAge     = time.Hour
	// switchoverMargin: the path must have sustained this share of the cap.
	switchoverMargin = 0.95
)

// switchoverBandwidth is what to tell QEMU its switch-over may count on
// (libvirt's bandwidth.avail.switchover, in MiB/s), or 0 to leave QEMU to
// its own figure. QEMU sets the remainder it switches over at, and the
// downtime it expects, from bytes sent over time spent, a figure that
// sinks while it scans zero pages (a few bytes each on the wire): a
// migration that would fit its downtime keeps copying. A capped
// migration's full speed is its cap. Where the path was seen to sustain
// that cap, on a recent migration to the same node that was not
// compressed and ran with no lower cap, QEMU is told the cap: what its
// own figure reaches when it sends at full speed, never less, so a
// migration QEMU measures right switches as before. libvirt takes the
// figure only at the start, so it is told only where it holds to the end:
// not to an uncapped migration, and not while the link is shared (the
// scheduler's, or another outbound migration's).
func switchoverBandwidth(jobs []api.Job, targetNode string, capMiBs int, shared bool, now time.Time) (mibs uint64, why string) {
	if shared || targetNode == "" || capMiBs <= 0 {
		return 0, ""
	}
	var past []api.Job
	for _, j := range jobs {
		p := j.Proxy
		if j.Role == api.RoleSource && j.Phase == api.PhaseCompleted && j.EndTime != nil && now.Sub(*j.EndTime) < switchoverAge &&
			p != nil && p.TargetNode == targetNode && p.WireBytesPerSecond > 0 && p.Compression == "" && (p.CapMiBs == 0 || p.CapMiBs >= capMiBs) {
			past = append(past, j)
		}
	}
	slices.SortFunc(past, func(a, b api.Job) int { return b.EndTime.Compare(*a.EndTime) })
	past = past[:min(len(past), switchoverHistory)]
	if len(past) == 0 {
		return 0, ""
	}
	best := slices.MaxFunc(past, func(a, b api.Job) int { return cmp.Compare(a.Proxy.WireBytesPerSecond, b.Proxy.WireBytesPerSecond) })
	if float64(best.Proxy.WireBytesPerSecond) < switchoverMargin*float64(uint64(capMiBs)<<20) {
		return 0, ""
	}
	return uint64(capMiBs), fmt.Sprintf("the wire to %s sustained %.1f MiB/s on a migration there %s ago, at least this migration's cap of %d MiB/s",
		targetNode, float64(best.Proxy.WireBytesPerSecond)/(1<<20), now.Sub(*best.EndTime).Round(time.Second), capMiBs)
}

// switchoverSince is the first libvirt with bandwidth.avail.switchover
// (11.1.0), and switchoverQEMU the first QEMU (8.2.0); older ones would
// refuse the whole Perform for it.
const (
	switchoverSince = 11_001_000
	switchoverQEMU  = 8_002_000
)

// switchoverParam is the Perform parameter for switchoverBandwidth, or
// none; info says what was told and why.
func (s *Source) switchoverParam(ctx context.Context, conn *libvirtx.Conn, req MigrateRequest, info *api.ProxyInfo) []libvirt.TypedParam {
	others := s.slots.status()
	shared := s.cfg.LinkBytesPerSecond > 0 || others.Used > 1 || others.Queued > 0
	mibs, why := switchoverBandwidth(s.tracker.Jobs(true), info.TargetNode, req.BandwidthMiBs, shared, time.Now())
	if mibs == 0 {
		return nil
	}
	log := s.log.With(zap.String("domain", req.Domain), zap.String("targetNode", info.TargetNode))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lv, err := conn.Ping(ctx)
	var hv uint64
	if err == nil {
		hv, err = conn.HypervisorVersion(ctx)
	}
	if err != nil || lv < switchoverSince || hv < switchoverQEMU {
		log.Info("switch-over bandwidth not told: this node's libvirt is older than 11.1 or its QEMU than 8.2, or they did not say",
			zap.Uint64("libvirt", lv), zap.Uint64("qemu", hv), zap.Error(err))
		return nil
	}
	info.SwitchoverBandwidthMiBs, info.SwitchoverFrom = mibs, why
	log.Info("switch-over bandwidth told", zap.Uint64("mibs", mibs), zap.String("why", why))
	return []libvirt.TypedParam{{Field: libvirt.MigrateParamBandwidthAvailSwitchover, Value: *libvirt.NewTypedParamValueUllong(mibs)}}
}
