package drive

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
)

func pastMigration(node string, end time.Time, wireMiBs uint64) api.Job {
	return api.Job{Role: api.RoleSource, Phase: api.PhaseCompleted, EndTime: &end,
		Proxy: &api.ProxyInfo{TargetNode: node, WireBytesPerSecond: wireMiBs << 20}}
}

func TestSwitchoverBandwidthIsTheCapThePathSustained(t *testing.T) {
	now := time.Now()
	with := func(j api.Job, f func(*api.Job)) api.Job {
		p := *j.Proxy
		j.Proxy = &p
		f(&j)
		return j
	}
	sustained := pastMigration("b", now.Add(-time.Minute), 47)
	cases := []struct {
		name   string
		jobs   []api.Job
		cap    int
		shared bool
		want   uint64
	}{
		{"the path sustained the cap", []api.Job{sustained}, 48, false, 48},
		{"the path sustained more than the cap", []api.Job{pastMigration("b", now, 300)}, 48, false, 48},
		{"the path fell short of the cap", []api.Job{pastMigration("b", now, 40)}, 48, false, 0},
		{"an uncapped migration", []api.Job{sustained}, 0, false, 0},
		{"a shared link", []api.Job{sustained}, 48, true, 0},
		{"another node's path", []api.Job{pastMigration("c", now, 500)}, 48, false, 0},
		{"a compressed migration says nothing of the wire", []api.Job{with(sustained, func(j *api.Job) { j.Proxy.Compression = "zstd" })}, 48, false, 0},
		{"a lower cap then says nothing of this one", []api.Job{with(sustained, func(j *api.Job) { j.Proxy.CapMiBs = 16 })}, 48, false, 0},
		{"a cap as high then does", []api.Job{with(sustained, func(j *api.Job) { j.Proxy.CapMiBs = 64 })}, 48, false, 48},
		{"too old", []api.Job{pastMigration("b", now.Add(-2*time.Hour), 300)}, 48, false, 0},
		{"failed migrations say nothing", []api.Job{with(sustained, func(j *api.Job) { j.Phase = api.PhaseFailed })}, 48, false, 0},
		{"only the last five", []api.Job{
			pastMigration("b", now.Add(-9*time.Minute), 300),
			pastMigration("b", now.Add(-5*time.Minute), 30), pastMigration("b", now.Add(-4*time.Minute), 30),
			pastMigration("b", now.Add(-3*time.Minute), 30), pastMigration("b", now.Add(-2*time.Minute), 30),
			pastMigration("b", now.Add(-time.Minute), 30)}, 48, false, 0},
	}
	for _, c := range cases {
		got, why := switchoverBandwidth(c.jobs, "b", c.cap, c.shared, now)
		if got != c.want {
			t.Errorf("%s: %d MiB/s (%s), want %d", c.name, got, why, c.want)
		}
		if got > 0 && !strings.Contains(why, "sustained") {
			t.Errorf("%s: the note does not say where the figure comes from: %q", c.name, why)
		}
	}
}
