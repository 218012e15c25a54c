package drive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// Compression values of a MigrateRequest.
const (
	CompressionNone = "none"
	CompressionZstd = "zstd"
	CompressionAuto = "auto"
)

// zstdKeepsUpBelow is the link rate under which compressing a migration's
// pages with zstd (level 1, one channel per spare CPU, at most
// maxDataChannels) sends them faster than the link would carry them
// plain. zstd's level 1 compresses some hundreds of MiB/s per core;
// above this it would hold the link back.
const zstdKeepsUpBelow = 256 << 20

// maxDataChannels bounds the multifd channels chosen: each is one more
// connection through both proxies and one more compression thread.
const maxDataChannels = 4

// dataEvidence is what a migration's data settings are chosen from.
type dataEvidence struct {
	PostCopy bool
	// Link is what the migration may send at: its cap, else what the
	// path carried (0: unknown); LinkFrom says which.
	Link     uint64
	LinkFrom string
	// Dirty is the guest's measured dirty rate; 0 with DirtyKnown false
	// when never measured.
	Dirty      uint64
	DirtyKnown bool
	// SpareCPUs is the source host's idle CPUs just now.
	SpareCPUs float64
}

// dataChoice is a migration's multifd channels and compression, and why.
type dataChoice struct {
	Parallel    int
	Compression string
	Why         string
}

// chooseData picks multifd channels and zstd compression for a migration
// from evidence. Compression pays where the link, not the CPU, is what
// limits: on a link slower than zstd keeps up with, with an idle CPU on
// the source. One channel keeps up with such a link; a guest dirtying at
// half the link or more, which needs every byte of speed to converge, gets
// one per idle CPU (at most maxDataChannels). It cannot be had with
// post-copy (multifdWithPostCopy). On a fast link, or
// with no CPU to spare, the stream stays as asked.
func chooseData(e dataEvidence) dataChoice {
	mib := func(b uint64) string { return fmt.Sprintf("%.1f MiB/s", float64(b)/(1<<20)) }
	dirty := "dirty rate not measured yet"
	if e.DirtyKnown {
		dirty = "dirty rate " + mib(e.Dirty)
	}
	switch {
	case e.PostCopy:
		return dataChoice{Compression: CompressionNone, Why: "no compression: post-copy is allowed, and compression needs multifd, which Ferry does not take with post-copy"}
	case e.Link == 0:
		return dataChoice{Compression: CompressionNone, Why: "no compression: the link's rate is unknown (no cap, and no uncapped migration over the path yet), and on a fast link compression would hold it back"}
	case e.Link >= zstdKeepsUpBelow:
		return dataChoice{Compression: CompressionNone, Why: fmt.Sprintf("no compression: the link carries %s (%s), faster than zstd keeps up with on %d channels", mib(e.Link), e.LinkFrom, maxDataChannels)}
	case e.SpareCPUs < 1:
		return dataChoice{Compression: CompressionNone, Why: fmt.Sprintf("no compression: the source has %.1f idle CPUs, less than one to compress with", e.SpareCPUs)}
	}
	n, need := 1, "one keeps up with the link"
	if e.DirtyKnown && e.Dirty >= e.Link/2 {
		n, need = min(int(e.SpareCPUs), maxDataChannels), "dirtying at half the link or more, it needs every byte of speed"
	}
	why := fmt.Sprintf("zstd on %d multifd channel(s): the link carries %s (%s), the source has %.1f idle CPUs, %s; %s", n, mib(e.Link), e.LinkFrom, e.SpareCPUs, dirty, need)
	return dataChoice{Parallel: n, Compression: CompressionZstd, Why: why}
}

// chooseFor gathers a migration's evidence and chooses.
func (s *Source) chooseFor(ctx context.Context, socket string, req MigrateRequest) dataChoice {
	e := dataEvidence{PostCopy: req.PostCopy || req.PostCopyAfterSeconds > 0}
	e.Link, e.LinkFrom = pathRate(s.tracker.Jobs(true), req.TargetNode, req.BandwidthMiBs)
	if s.cfg.DirtyRate != nil {
		e.Dirty, e.DirtyKnown = s.cfg.DirtyRate(socket, req.Domain)
	}
	spare, err := spareCPUs(ctx)
	if err != nil {
		return dataChoice{Compression: CompressionNone, Why: "no compression: the source's idle CPUs could not be read: " + err.Error()}
	}
	e.SpareCPUs = spare
	return chooseData(e)
}

// pathRate is what a migration to node may send at: its cap, else the
// most the wire to node sustained on a recent migration there that was
// neither capped nor compressed (the others say what they were held to).
func pathRate(jobs []api.Job, node string, capMiBs int) (uint64, string) {
	if capMiBs > 0 {
		return uint64(capMiBs) << 20, "its cap"
	}
	if node == "" {
		return 0, ""
	}
	var best uint64
	for _, j := range jobs {
		if p := j.Proxy; j.Role == api.RoleSource && j.Phase == api.PhaseCompleted && p != nil && p.TargetNode == node &&
			p.CapMiBs == 0 && p.Compression == "" {
			best = max(best, p.WireBytesPerSecond)
		}
	}
	if best == 0 {
		return 0, ""
	}
	return best, "what the wire to " + node + " sustained"
}

// spareCPUs is how many of the host's CPUs were idle over a short look at
// /proc/stat: the whole host's, not what a cgroup or a CPU pinning leaves
// the guest's QEMU, which Ferry-driven migrations (plain libvirt hosts)
// rarely have.
func spareCPUs(ctx context.Context) (float64, error) {
	a, err := cpuTicks()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(250 * time.Millisecond):
	}
	b, err := cpuTicks()
	if err != nil {
		return 0, err
	}
	total, idle := b.total-a.total, b.idle-a.idle
	if total <= 0 {
		return 0, errors.New("/proc/stat did not move")
	}
	return float64(b.cpus) * float64(idle) / float64(total), nil
}

type ticks struct {
	total, idle int64 // all CPUs' ticks, and their idle and iowait part
	cpus        int
}

func cpuTicks() (ticks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return ticks{}, err
	}
	var t ticks
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case fields[0] == "cpu":
			if len(fields) < 6 {
				return ticks{}, fmt.Errorf("/proc/stat: unexpected line %q", line)
			}
			// user nice system idle iowait irq softirq; steal and the
			// guest times are not this host's work, or counted already.
			for i, v := range fields[1:min(len(fields), 8)] {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return ticks{}, fmt.Errorf("/proc/stat: %w", err)
				}
				t.total += n
				if i == 3 || i == 4 {
					t.idle += n
				}
			}
		case strings.HasPrefix(fields[0], "cpu"):
			t.cpus++
		}
	}
	if t.cpus == 0 {
		return ticks{}, errors.New("/proc/stat lists no CPU")
	}
	return t, nil
}
