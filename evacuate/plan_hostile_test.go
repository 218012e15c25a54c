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
	"github.com/ferry-vm/ferry/evacuate/evacuatetest"
	"github.com/ferry-vm/ferry/measure"
)

// errLate is a call the fake libvirt left unanswered in time.
var errLate = errors.New("libvirt did not answer in time")

// fakeLibvirt answers as launchers' libvirt daemons do: each socket a
// pod's, each running one domain.
type fakeLibvirt struct {
	doms map[string]*fakeDomain // by socket
}

func (f *fakeLibvirt) Domain(socket, name string) (LiveDomain, error) {
	d := f.doms[socket]
	if d == nil || d.name != name {
		return nil, fmt.Errorf("no domain %s on %s", name, socket)
	}
	return d, nil
}

func (f *fakeLibvirt) Launcher(socket string) bool   { return f.doms[socket] != nil }
func (*fakeLibvirt) RefusedFeatures(string) []string { return nil }
func (*fakeLibvirt) TimedOut(err error) bool         { return errors.Is(err, errLate) }

// fakeDomain is a KVM guest with disks files of its pod's; size answers
// each disk's size, and the calls are counted.
type fakeDomain struct {
	socket, name string
	disks        int
	size         func(ctx context.Context) (uint64, bool, error)

	mu    sync.Mutex
	sizes int
}

func (d *fakeDomain) Socket() string { return d.socket }
func (d *fakeDomain) XML(context.Context) (string, error) {
	return evacuatetest.GuestXML(d.name, d.disks), nil
}

// StorageRoot: a launcher's QEMU whose pid file is not found.
func (d *fakeDomain) StorageRoot() string { return "" }

func (d *fakeDomain) DiskSize(ctx context.Context, _ string) (uint64, bool, error) {
	d.mu.Lock()
	d.sizes++
	d.mu.Unlock()
	return d.size(ctx)
}

func (d *fakeDomain) sizeCalls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sizes
}

// sized answers a disk's size: 10 GiB.
func sized(context.Context) (uint64, bool, error) { return 10 << 30, true, nil }

// neverSized leaves a size call unanswered until the call's timeout, as a
// pod's libvirt that never answers it does.
func neverSized(timeout time.Duration) func(context.Context) (uint64, bool, error) {
	return func(ctx context.Context) (uint64, bool, error) {
		select {
		case <-time.After(timeout):
		case <-ctx.Done():
		}
		return 0, false, errLate
	}
}

// fakeTracker lists the domains, all running, and no jobs.
type fakeTracker []api.Domain

func (t fakeTracker) Domains() []api.Domain { return t }
func (fakeTracker) Jobs(bool) []api.Job     { return nil }

// fakeMeter has measured every guest: 1 GiB dirtying 8 MiB/s.
type fakeMeter struct{}

func (fakeMeter) Measure(context.Context, string, string, time.Duration) (api.DirtyRate, error) {
	return api.DirtyRate{BytesPerSecond: 8 << 20}, nil
}

func (fakeMeter) Annotate(doms []api.Domain) {
	for i := range doms {
		doms[i].MemoryBytes, doms[i].DirtyBytesPerSecond = 1<<30, 8<<20
	}
}

// One pod whose 30 disks' sizes are never answered is reported as not
// measured, naming it and what it left unanswered; the node's other guest
// is planned as ever, and the plan and the evacuation answer in time.
func TestAPodThatNeverAnswersSizesIsNotMeasuredAndTheRestIsPlanned(t *testing.T) {
	const hostileDisks, callTimeout = 30, 2 * time.Second
	normal := &fakeDomain{socket: "/pods/default_normal/virtqemud-sock", name: "default_normal", disks: 1, size: sized}
	hostile := &fakeDomain{socket: "/pods/default_hostile/virtqemud-sock", name: "default_hostile", disks: hostileDisks, size: neverSized(callTimeout)}
	lv := &fakeLibvirt{doms: map[string]*fakeDomain{normal.socket: normal, hostile.socket: hostile}}
	var doms fakeTracker
	for _, d := range []*fakeDomain{normal, hostile} {
		doms = append(doms, api.Domain{Name: d.name, Socket: d.socket, State: running, Reason: "booted"})
	}
	peers := map[string]string{"n2": "127.0.0.1:1"}
	runner := NewRunner(&fakeMover{}, (&fakeMover{}).job, peers, zap.NewNop())
	planner := NewPlanner(PlanConfig{Node: "n1", Peers: peers, CallTimeout: callTimeout, Tracker: doms, Meter: fakeMeter{},
		DirtyRate: measure.Config{Period: time.Hour, Sample: time.Second, Concurrent: 4}},
		NewChecker(CheckConfig{Node: "n1", Libvirt: lv}), runner)

	// Asked one after the other, the 30 sizes alone would take a minute.
	const bound = 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start := time.Now()
	p, err := planner.Plan(ctx, api.PlanRequest{})
	if err != nil {
		t.Fatalf("plan: %v after %v", err, time.Since(start))
	}
	if took := time.Since(start); took > bound {
		t.Fatalf("the plan took %v", took)
	}
	evacuatetest.CheckHostilePlan(t, p.Entries, normal.name, hostile.name)
	if n := hostile.sizeCalls(); n > SizesAtOnce {
		t.Errorf("the hostile domain was asked %d sizes; once one went unanswered, no more than the %d under way at once should be", n, SizesAtOnce)
	}

	// The evacuation plans what the tracker lists, as ever.
	if _, err := runner.Hold("n1", []string{"n2"}); err != nil {
		t.Fatal(err)
	}
	p, err = planner.Plan(ctx, api.PlanRequest{Targets: []string{"n2"}, DryRun: true})
	if err != nil {
		t.Fatalf("the evacuation's plan: %v", err)
	}
	ev := runner.Start(p, true)
	evacuatetest.CheckHostilePlan(t, ev.Entries, normal.name, hostile.name)
	waitEnded(t, runner)
}
