// Command soak migrates guests that check their own memory back and forth
// between the test bed's two nodes through Ferry, without pause, and
// injects a fault at a random moment every 20 to 60 s of migrating: a
// ferryd killed or restarted, a libvirtd restarted, the link cut, the
// proxies' streams reset. After each fault it lets the migrations in
// flight end and checks the real systems: each guest runs whole on
// exactly one node as both libvirtds say, its memory is as it wrote it by
// its own check, and both ferryds' records agree with libvirt. At the end
// it compares the ferryds' memory, descriptors and goroutines with their
// level after the warm-up, and looks for stale records in their state
// directories. The faults and each migration's mode come from one seed;
// a failing run prints the command that replays it. Run it on a bed that
// is up with ferryd; test/soak/soak.sh brings one up.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ferry-vm/ferry/api/client"
	"github.com/ferry-vm/ferry/test/testbed"
)

func main() { testbed.Main("soak", run) }

var nodes = []string{"a", "b"}

func other(node string) string {
	if node == "a" {
		return "b"
	}
	return "a"
}

// soak is one run.
type soak struct {
	o     options
	bed   *testbed.Bed
	start time.Time
	gate  *gate
	// stop ends the run at its first violation.
	stop context.CancelCauseFunc

	mu sync.Mutex
	// last is each guest's latest migration Ferry accepted.
	last map[string]*migration
	// current is each guest's migration under way, if any.
	current map[string]*migration
	// ferrydEpoch and libvirtdEpoch count the soak's restarts of each
	// node's daemons: a record a restarted ferryd no longer has, or a
	// libvirt figure a restarted libvirtd no longer keeps, is no fault.
	ferrydEpoch, libvirtdEpoch map[string]int
	injected                   []injection
	violations                 []string
	// stopped: a violation has ended the run.
	stopped               bool
	migrations, completed int
	usage                 *usageBook
}

// injection is a fault as it happened.
type injection struct {
	n      int
	at     time.Duration
	f      fault
	during []string // the migrations it fell on
	result string
}

func (i injection) String() string {
	s := fmt.Sprintf("%d. at +%s: %s", i.n, clock(i.at), i.f)
	if i.result != "" {
		s += " (" + i.result + ")"
	}
	if len(i.during) > 0 {
		s += "\n       during: " + strings.Join(i.during, "\n               ")
	}
	return s
}

func clock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%02d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

func (s *soak) logf(format string, args ...any) {
	fmt.Printf("soak [+%s] %s\n", clock(time.Since(s.start)), fmt.Sprintf(format, args...))
}

func (s *soak) ferryd(node string) *client.Client {
	return client.New(s.bed.Node(node).DebugSocket)
}

func guestName(i int) string { return fmt.Sprintf("soak%d", i+1) }

func run(ctx context.Context, args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	if !o.seedSet {
		o.seed = uint64(time.Now().UnixNano())
	}
	fmt.Printf("soak: seed %d, duration %s\n", o.seed, durationText(o.duration))
	sched := schedule(o.seed, o.duration)
	fmt.Printf("soak: %d faults, each after that long of migrating:\n%s", len(sched), scheduleText(sched))
	bed, err := testbed.Open(testbed.Config{Log: os.Stderr})
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if bed.FerrydPID(n) == 0 {
			return fmt.Errorf("no ferryd runs on node %s: bring the bed up with ferryd (test/soak/soak.sh does)", n)
		}
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	s := &soak{o: o, bed: bed, start: time.Now(), gate: newGate(), stop: stop,
		last: map[string]*migration{}, current: map[string]*migration{},
		ferrydEpoch: map[string]int{}, libvirtdEpoch: map[string]int{}, usage: newUsageBook()}
	s.logf("accelerator %s; %d guests of %d MiB dirtying %d MiB at %d MiB/s, each checking it every second",
		strings.ToUpper(bed.Accel()), o.guests, o.memoryMiB, o.dirtyMiB, o.dirtyRateMiBs)
	defer func() {
		// A run cut short must not leave the nodes apart for the next.
		if err := bed.RestoreLink(); err != nil {
			s.logf("restoring the link: %v", err)
		}
	}()
	var guests []string
	for i := range o.guests {
		name := guestName(i)
		if err := bed.StartGuest(ctx, testbed.GuestSpec{Name: name, Node: "a", MemoryMiB: o.memoryMiB,
			DirtyMiB: o.dirtyMiB, DirtyRateMiBs: o.dirtyRateMiBs, Verify: true}); err != nil {
			return err
		}
		guests = append(guests, name)
	}
	deadline := s.start.Add(o.duration)

	var wg sync.WaitGroup
	for i, g := range guests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.migrate(ctx, i, g)
		}()
	}
	stopped := func() error {
		stop(errors.New("the run ended"))
		wg.Wait()
		return nil
	}

	s.gate.setOpen(true)
	s.usage.gateOpened(bed)
	opened := time.Now()
	end := "the end of the run"
	for i, f := range sched {
		if !sleepCtx(ctx, time.Until(opened.Add(f.Gap))) {
			break
		}
		s.gate.setOpen(false)
		s.inject(ctx, i+1, f)
		if !s.settleAndCheck(ctx, guests, fmt.Sprintf("fault %d (%s)", i+1, f)) {
			break
		}
		s.gate.setOpen(true)
		s.usage.gateOpened(bed)
		opened = time.Now()
	}
	if ctx.Err() == nil {
		// The rest of the duration migrating, and at least a while, so
		// the last measurement follows migrations as the first did.
		rest := max(time.Until(deadline), 30*time.Second)
		s.logf("the schedule is done: migrating for %v more, then the last checks", rest.Round(time.Second))
		if sleepCtx(ctx, rest) {
			s.gate.setOpen(false)
			s.settleAndCheck(ctx, guests, end)
		}
	}
	interrupted := ctx.Err() != nil && !s.failed()
	stopped()
	if !s.failed() && !interrupted {
		s.finalChecks()
	}
	return s.report(interrupted)
}

// sleepCtx waits d, false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
