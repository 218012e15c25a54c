package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// drove is a completed migration to node that sent mibs at rate MiB/s and
// took seconds from start to settled, ending at end.
func drove(node string, mibs, rate uint64, seconds float64, end time.Time) api.Job {
	start := end.Add(-time.Duration(seconds * float64(time.Second)))
	return api.Job{
		Role: api.RoleSource, Phase: api.PhaseCompleted, Proxy: &api.ProxyInfo{}, PeerNode: node,
		StartTime: start, EndTime: &end, DataProcessedBytes: mibs * mib, TransferRateBytesPerSecond: rate * mib,
	}
}

func TestLearnTakesTheMedianSetupOverThePath(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	jobs := []api.Job{
		// The first over the path: 128 MiB at 32 MiB/s is 4 s, and it
		// took 8 (a cold target).
		drove("b", 128, 32, 8, t0),
		drove("b", 256, 32, 9, t0.Add(time.Minute)),     // 1 s besides memory
		drove("b", 256, 32, 9.5, t0.Add(2*time.Minute)), // 1.5 s
		drove("c", 256, 32, 8.2, t0.Add(3*time.Minute)), // another path
	}
	l := Learn(jobs, []string{"b"}, 0, "")
	if l.Path.BandwidthBytesPerSecond != 32*mib || !strings.Contains(l.BandwidthFrom, "last 3") {
		t.Errorf("bandwidth %d (%s), want 32 MiB/s from 3 migrations", l.Path.BandwidthBytesPerSecond, l.BandwidthFrom)
	}
	if l.Path.Setup != 1500*time.Millisecond {
		t.Errorf("setup %v (%s), want 1.5s: the median of b's three", l.Path.Setup, l.SetupFrom)
	}
	if all := Learn(jobs, nil, 0, ""); all.Path.Setup != 1250*time.Millisecond {
		t.Errorf("every target: setup %v, want 1.25s from all four", all.Path.Setup)
	}
}

func TestLearnWeighsOnlyTheNewestFive(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// An old fast one, then five slower: the link changed.
	jobs := []api.Job{drove("b", 128, 32, 4.5, t0)}
	for i := range 5 {
		jobs = append(jobs, drove("b", 128, 16, 10, t0.Add(time.Duration(i+1)*time.Minute)))
	}
	l := Learn(jobs, nil, 0, "")
	if l.Path.BandwidthBytesPerSecond != 16*mib || l.Path.Setup != 2*time.Second {
		t.Errorf("learned %d B/s and %v, want 16 MiB/s and 2s from the newest five", l.Path.BandwidthBytesPerSecond, l.Path.Setup)
	}
}

func TestLearnWithAGivenBandwidth(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Sent at 32 MiB/s while the link is now given as 16: the setup is
	// what it spent besides sending at its own 32.
	l := Learn([]api.Job{drove("b", 128, 32, 7, t0)}, nil, 16*mib, "given")
	if l.Path.BandwidthBytesPerSecond != 16*mib || l.BandwidthFrom != "given" || l.Path.Setup != 3*time.Second {
		t.Errorf("learned %+v, want the given 16 MiB/s and a setup of 3s", l)
	}
}

func TestLearnWithNothingToLearnFrom(t *testing.T) {
	running := drove("b", 128, 32, 5, time.Now())
	running.Phase = api.PhaseRunning
	driven := drove("b", 128, 32, 5, time.Now())
	driven.Proxy = nil // not Ferry's: its start is not the whole migration's
	l := Learn([]api.Job{running, driven}, nil, 0, "")
	if l.Path.BandwidthBytesPerSecond != 0 || l.BandwidthFrom != "" || l.Path.Setup != DefaultSetup {
		t.Errorf("learned %+v from no completed driven migration", l)
	}
}
