package plan

import (
	"fmt"
	"math"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/units"
	"github.com/ferry-vm/ferry/migration"
)

// Guest is what is known of a domain before it migrates.
type Guest struct {
	MemoryBytes uint64
	// ResidentBytes is what QEMU holds in RAM; zero when unknown. A page
	// never touched costs next to nothing to send.
	ResidentBytes uint64
	// DirtyBytesPerSecond is the measured dirty rate.
	DirtyBytesPerSecond uint64
}

// Path is what is known of the way to the target.
type Path struct {
	BandwidthBytesPerSecond uint64
	// Setup is what a migration costs besides sending memory: the
	// target's prepare (its QEMU's start) and the protocol's steps.
	Setup time.Duration
}

// Limits are the policy's.
type Limits struct {
	MaxDowntime   time.Duration
	AllowPostCopy bool
}

// postCopySwitch is the pause of a switch to post-copy: the source stops,
// sends the device state and the dirty bitmap, the target starts (10-100 ms
// seen on the test bed).
const postCopySwitch = 100 * time.Millisecond

// Predict says how a migration of g over p under l will go.
func Predict(g Guest, p Path, l Limits) api.Prediction {
	maxDowntime := l.MaxDowntime
	if maxDowntime <= 0 {
		maxDowntime = migration.DefaultMaxDowntime
	}
	first := g.MemoryBytes
	if g.ResidentBytes > 0 {
		first = min(first, g.ResidentBytes)
	}
	pr := api.Prediction{MemoryBytes: g.MemoryBytes, FirstPassBytes: first, DirtyBytesPerSecond: g.DirtyBytesPerSecond,
		BandwidthBytesPerSecond: p.BandwidthBytesPerSecond, MaxDowntimeMs: uint64(maxDowntime / time.Millisecond), SetupSeconds: p.Setup.Seconds()}
	if p.BandwidthBytesPerSecond == 0 {
		pr.Strategy, pr.Reason = api.StrategyCannotMove, "no bandwidth to the target is known: give one, or migrate over the path once"
		return pr
	}
	bw, dirty := float64(p.BandwidthBytesPerSecond), float64(g.DirtyBytesPerSecond)
	m := dirty / bw
	threshold := bw * maxDowntime.Seconds()
	// The first pass sends what the guest holds; the guest meanwhile
	// dirties at its rate, up to all it holds.
	firstSecs := float64(first) / bw
	left := math.Min(float64(first), dirty*firstSecs)
	figures := fmt.Sprintf("first pass %s, dirty %s/s against %s/s (%.0f %% a pass), allowed downtime %v",
		units.IEC(first), units.IEC(g.DirtyBytesPerSecond), units.IEC(p.BandwidthBytesPerSecond), 100*m, maxDowntime)
	passes, fits := migration.PassesToFit(left, threshold, m)
	if fits {
		secs := p.Setup.Seconds() + firstSecs + float64(left)/bw + migration.PassesSeconds(left, bw, m, passes)
		last := left * math.Pow(m, passes)
		pr.Strategy, pr.Converges = api.StrategyPreCopy, true
		pr.Passes, pr.Seconds, pr.DowntimeMs = 2+int(passes), secs, 1000*last/bw
		if left <= threshold {
			// What the first pass left is sent in the stop-and-copy.
			pr.Passes, pr.Seconds = 2, p.Setup.Seconds()+firstSecs+left/bw
		}
		pr.Reason = fmt.Sprintf("converges in %d passes: %s", pr.Passes, figures)
		return pr
	}
	if l.AllowPostCopy {
		// After the first pass, the target runs the guest and pulls the
		// rest; what the guest dirties then is dirtied there.
		pr.Strategy = api.StrategyPostCopy
		pr.Passes, pr.Seconds, pr.DowntimeMs = 1, p.Setup.Seconds()+firstSecs+left/bw, float64(postCopySwitch/time.Millisecond)
		pr.Reason = "pre-copy would not converge, post-copy after the first pass: " + figures
		return pr
	}
	pr.Strategy, pr.Passes = api.StrategyCannotMove, 1
	pr.Reason = "pre-copy would not converge, and post-copy is not allowed: " + figures
	return pr
}
