package plan

import (
	"fmt"
	"slices"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
)

// DefaultSetup is what a migration is taken to cost besides its memory
// until one over the path says: the target's prepare, its QEMU's start.
const DefaultSetup = 2 * time.Second

// learnFrom is how many of the newest migrations over a path teach it.
const learnFrom = 5

// Learned is a path and where its figures come from.
type Learned struct {
	Path          Path
	BandwidthFrom string // "" when nothing says
	SetupFrom     string
}

// Learn is the path to targets (all of them when empty) from the newest
// migrations this node drove there, given a bandwidth (0: learn it too,
// and givenFrom says where a non-zero one comes from). The bandwidth is
// the median of their passes' rates; the setup the median of what each
// spent besides sending its memory at its own rate and its downtime. The
// newest five only: a path that changed is learned anew.
func Learn(jobs []api.Job, targets []string, given uint64, givenFrom string) Learned {
	l := Learned{Path: Path{Setup: DefaultSetup, BandwidthBytesPerSecond: given}, SetupFrom: "default, until a migration over the path says"}
	if given > 0 {
		l.BandwidthFrom = givenFrom
	}
	var done []api.Job
	for _, j := range jobs {
		if j.Role != api.RoleSource || j.Phase != api.PhaseCompleted || j.Proxy == nil || j.EndTime == nil ||
			len(targets) > 0 && !slices.Contains(targets, j.PeerNode) || migration.TransferRate(j) <= 0 {
			continue
		}
		done = append(done, j)
	}
	slices.SortFunc(done, func(a, b api.Job) int { return b.EndTime.Compare(*a.EndTime) })
	done = done[:min(len(done), learnFrom)]
	if len(done) == 0 {
		return l
	}
	var rates []float64
	for _, j := range done {
		rates = append(rates, migration.TransferRate(j))
	}
	if given == 0 {
		l.Path.BandwidthBytesPerSecond = uint64(migration.Median(rates))
		l.BandwidthFrom = fmt.Sprintf("learned from the last %d migrations to the targets", len(done))
	}
	// Each at its own rate: a given bandwidth is the path's to come,
	// not what an earlier migration got.
	setups := make([]float64, len(done))
	for i, j := range done {
		spent := j.EndTime.Sub(j.StartTime).Seconds() - float64(j.DataProcessedBytes)/rates[i] - float64(j.DowntimeMs)/1000
		setups[i] = max(spent, 0)
	}
	l.Path.Setup = time.Duration(migration.Median(setups) * float64(time.Second)).Round(time.Millisecond)
	l.SetupFrom = fmt.Sprintf("learned from the last %d migrations to the targets", len(done))
	return l
}
