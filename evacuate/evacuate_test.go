package evacuate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/drive"
)

// fakeMover starts migrations that complete at once, except those named
// in fail; its jobs say so.
type fakeMover struct {
	mu      sync.Mutex
	started []drive.MigrateRequest
	fail    map[string]bool
	hold    chan struct{} // when set, Start waits for it
}

func (f *fakeMover) Start(_ context.Context, req drive.MigrateRequest) (drive.MigrateResponse, error) {
	if f.hold != nil {
		<-f.hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, req)
	return drive.MigrateResponse{MigrationID: "m-" + req.Domain}, nil
}

func (f *fakeMover) DryRun(_ context.Context, req drive.MigrateRequest) (api.DryRun, error) {
	if f.fail[req.Domain] {
		return api.DryRun{OK: false, Error: "refused by the target"}, nil
	}
	return api.DryRun{OK: true}, nil
}

func (f *fakeMover) job(_, domain string) (api.Job, error) {
	phase := api.PhaseCompleted
	if f.fail[domain] {
		phase = api.PhaseFailed
	}
	return api.Job{Phase: phase, FailureReason: "cut", Proxy: &api.ProxyInfo{MigrationID: "m-" + domain}}, nil
}

func planOf(entries ...api.PlanEntry) api.Plan {
	return api.Plan{Node: "a", Targets: []string{"b"}, Entries: entries, Parallel: 1}
}

func waitEnded(t *testing.T, r *Runner) api.Evacuation {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if ev, ok := r.Last(); ok && !ev.Running {
			return ev
		}
	}
	t.Fatal("the evacuation did not end")
	return api.Evacuation{}
}

// The plan's domains move in its order, to their target's proxy, one
// predicted to need post-copy with it allowed; one the plan gives no
// target is skipped, and one whose migration fails says how.
func TestAnEvacuationMovesThePlanInItsOrder(t *testing.T) {
	f := &fakeMover{fail: map[string]bool{"v3": true}}
	r := NewRunner(f, f.job, map[string]string{"b": "10.0.0.2:9475"}, zap.NewNop())
	r.Start(planOf(
		api.PlanEntry{Domain: "v1", Target: "b"},
		api.PlanEntry{Domain: "stuck"},
		api.PlanEntry{Domain: "v2", Target: "b", Prediction: &api.Prediction{Strategy: api.StrategyPostCopy}},
		api.PlanEntry{Domain: "v3", Target: "b"},
	), false)
	ev := waitEnded(t, r)
	var order []string
	for _, s := range f.started {
		order = append(order, s.Domain)
		if s.Target != "10.0.0.2:9475" || s.TargetNode != "b" || s.PostCopy != (s.Domain == "v2") {
			t.Errorf("%s started as %+v", s.Domain, s)
		}
	}
	if fmt.Sprint(order) != "[v1 v2 v3]" {
		t.Errorf("started %v, want the plan's order [v1 v2 v3]", order)
	}
	states := fmt.Sprint(ev.Entries[0].State, ev.Entries[1].State, ev.Entries[2].State, ev.Entries[3].State)
	if states != "movedskippedmovedfailed" || ev.Moved != 2 || ev.Failed != 1 {
		t.Errorf("states %s, moved %d, failed %d", states, ev.Moved, ev.Failed)
	}
	if ev.Entries[3].Error != "migration m-v3 ended Failed: cut" {
		t.Errorf("the failed domain says %q", ev.Entries[3].Error)
	}
}

// A dry run moves nothing and says which domains their target would take.
func TestADryRunChecksEachDomainAndMovesNone(t *testing.T) {
	f := &fakeMover{fail: map[string]bool{"v2": true}}
	r := NewRunner(f, f.job, map[string]string{"b": "10.0.0.2:9475"}, zap.NewNop())
	r.Start(planOf(api.PlanEntry{Domain: "v1", Target: "b"}, api.PlanEntry{Domain: "v2", Target: "b"}), true)
	ev := waitEnded(t, r)
	if len(f.started) != 0 {
		t.Fatalf("a dry run started %v", f.started)
	}
	if ev.Entries[0].State != "checked" || ev.Entries[1].State != "failed" || ev.Entries[1].Error != "refused by the target" {
		t.Errorf("entries %+v", ev.Entries)
	}
}

// One evacuation at a time: a second is refused while the first plans or
// runs, and a hold given back after a failed plan leaves none.
func TestOneEvacuationAtATime(t *testing.T) {
	f := &fakeMover{hold: make(chan struct{})}
	r := NewRunner(f, f.job, nil, zap.NewNop())
	release, err := r.Hold("a", []string{"b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Hold("a", []string{"b"}); !errors.Is(err, ErrRunning) {
		t.Fatalf("a second evacuation while the first plans: %v", err)
	}
	release()
	if _, ok := r.Last(); ok {
		t.Fatal("a failed plan left an evacuation behind")
	}
	r.Start(planOf(api.PlanEntry{Domain: "v1", Target: "b"}), false)
	if _, err := r.Hold("a", []string{"b"}); !errors.Is(err, ErrRunning) {
		t.Fatalf("a second evacuation while the first runs: %v", err)
	}
	close(f.hold)
	waitEnded(t, r)
	if _, err := r.Hold("a", []string{"b"}); err != nil {
		t.Fatalf("after the first ended: %v", err)
	}
}
