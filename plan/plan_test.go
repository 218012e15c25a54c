package plan

import (
	"math"
	"testing"

	"github.com/ferry-vm/ferry/api"
)

func entry(name string, strategy string, secs float64) api.PlanEntry {
	return api.PlanEntry{Domain: name, Mover: api.MoverFerry, Migratable: strategy != "", Prediction: &api.Prediction{Strategy: strategy, Seconds: secs, SetupSeconds: 2}}
}

func TestOrderAndSchedule(t *testing.T) {
	es := []api.PlanEntry{entry("long", api.StrategyPreCopy, 12), entry("split", api.StrategyPostCopy, 8), entry("stuck", api.StrategyCannotMove, 0),
		entry("short", api.StrategyPreCopy, 6), entry("blocked", "", 0)}
	Order(es, []string{"b", "c"})
	var got []string
	for _, e := range es {
		got = append(got, e.Domain+":"+e.Target)
	}
	want := []string{"short:b", "long:c", "split:b", "stuck:", "blocked:"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
	// Two slots: short sets up 0-2 and sends 2-6; long sets up 0-2 beside
	// it and sends 6-16; split starts at 6, sets up 6-8 and sends 16-22.
	total := Schedule(es, 2)
	if math.Abs(total-22) > 1e-9 || es[2].StartSeconds != 6 || es[1].EndSeconds != 16 {
		t.Fatalf("total %.1f, split starts %.1f, long ends %.1f; want 22, 6, 16", total, es[2].StartSeconds, es[1].EndSeconds)
	}
	// One slot runs them one after another.
	if total := Schedule(es, 1); math.Abs(total-26) > 1e-9 {
		t.Fatalf("one slot: total %.1f, want 26", total)
	}
}
