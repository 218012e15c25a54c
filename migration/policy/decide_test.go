package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
)

const mib = 1 << 20

// series replays a recorded run: the memory each pass started with (MiB),
// the rates, and the verdict the tracker had reached at each pass.
type series struct {
	starts          []float64
	dirty, transfer uint64 // MiB/s
	verdicts        []api.Verdict
	elapsedPerPass  time.Duration
	// qemuTransfer is the bandwidth QEMU itself switches over on (MiB/s;
	// 0: the same as transfer).
	qemuTransfer uint64
}

func (s series) job(upTo int) api.Job {
	j := api.Job{Role: api.RoleSource, Phase: api.PhaseRunning, Mode: api.ModePreCopy,
		Iteration: uint64(upTo), DataTotalBytes: 512 * mib, MemoryTotalBytes: 512 * mib,
		DirtyRateBytesPerSecond: s.dirty * mib, TransferRateBytesPerSecond: s.transfer * mib,
		ElapsedMs:   uint64((time.Duration(upTo) * s.elapsedPerPass).Milliseconds()),
		Convergence: s.verdicts[upTo-1]}
	for i := 0; i < upTo; i++ {
		j.Iterations = append(j.Iterations, api.Iteration{Number: uint64(i + 1), MemoryRemainingBytes: uint64(s.starts[i] * mib)})
	}
	j.MemoryRemainingBytes = j.Iterations[upTo-1].MemoryRemainingBytes
	return j
}

// replay runs the policy at each pass, applying what it sets, and returns
// every decision other than None.
func replay(t *testing.T, s Settings, sr series, postCopyEnabled bool) []Decision {
	t.Helper()
	var m Memory
	var out []Decision
	downtime := migration.DefaultMaxDowntime
	qemu := sr.qemuTransfer
	if qemu == 0 {
		qemu = sr.transfer
	}
	for n := 1; n <= len(sr.starts); n++ {
		// QEMU stops the guest once a pass starts with what fits its
		// allowed downtime: the migration completes there.
		if n > 1 && sr.starts[n-1] <= float64(qemu)*downtime.Seconds() {
			t.Logf("pass %d: QEMU switches over (%.1f MiB within %v)", n, sr.starts[n-1], downtime)
			break
		}
		d := Decide(s, Evidence{Job: sr.job(n), MaxDowntime: downtime, PostCopyEnabled: postCopyEnabled}, &m)
		if again := Decide(s, Evidence{Job: sr.job(n), MaxDowntime: downtime, PostCopyEnabled: postCopyEnabled}, &m); again.Action != None {
			t.Fatalf("second decision in pass %d: %+v", n, again)
		}
		if d.Action == None {
			continue
		}
		t.Logf("pass %d: %s %v (%s): %s", n, d.Action, d.MaxDowntime, d.Trigger, d.Reason)
		if d.MaxDowntime > s.MaxDowntime {
			t.Fatalf("pass %d: max downtime %v over the %v cap", n, d.MaxDowntime, s.MaxDowntime)
		}
		if d.MaxDowntime%time.Millisecond != 0 {
			t.Fatalf("pass %d: max downtime %v is not whole milliseconds, as libvirt takes it", n, d.MaxDowntime)
		}
		if d.MaxDowntime > 0 {
			downtime = d.MaxDowntime
		}
		out = append(out, d)
	}
	return out
}

func verdicts(n, from int, v api.Verdict) []api.Verdict {
	out := make([]api.Verdict, n)
	for i := range out {
		out[i] = api.VerdictUnknown
		if i+1 >= from {
			out[i] = v
		}
	}
	return out
}

func act(maxDowntimeMs int, postCopy bool) Settings {
	s := Defaults()
	s.Mode, s.MaxDowntime, s.AllowPostCopy = Act, time.Duration(maxDowntimeMs)*time.Millisecond, postCopy
	return s
}

func TestStallJustAboveTheDefaultSwitchesOverAtTheLowPoint(t *testing.T) {
	// Passes settle at ~37 MiB on a 100 MiB/s link: 370 ms, over libvirt's
	// 300 ms default, under a 500 ms cap.
	sr := series{starts: []float64{511.2, 201.0, 45.3, 37.2, 38.9, 37.9}, dirty: 90, transfer: 100,
		verdicts: verdicts(6, 5, api.VerdictStalled), elapsedPerPass: 2 * time.Second}
	ds := replay(t, act(500, false), sr, false)
	if len(ds) != 1 || ds[0].Action != SwitchOver || ds[0].Iteration != 5 {
		t.Fatalf("decisions %+v, want one switch-over at pass 5", ds)
	}
	// 37.2 MiB at 100 MiB/s with 10 % headroom.
	if got := ds[0].MaxDowntime; got < 405*time.Millisecond || got > 415*time.Millisecond {
		t.Fatalf("max downtime %v, want what the low point needs (~409 ms)", got)
	}
	if !strings.Contains(ds[0].Reason, "low point 37.2 MiB") {
		t.Fatalf("reason does not carry the low point: %s", ds[0].Reason)
	}
}

func TestWorkingSetFarOverTheLinkGoesToPostCopyOrAborts(t *testing.T) {
	sr := series{starts: []float64{511.7, 383.2, 384.0, 383.6, 383.9, 384.1}, dirty: 2048, transfer: 130,
		verdicts: verdicts(6, 3, api.VerdictStalled), elapsedPerPass: 3 * time.Second}

	ds := replay(t, act(500, true), sr, true)
	if len(ds) != 1 || ds[0].Action != PostCopy || ds[0].Iteration != 3 {
		t.Fatalf("post-copy allowed: decisions %+v, want post-copy at pass 3", ds)
	}

	ds = replay(t, act(500, false), sr, true)
	if len(ds) != 1 || ds[0].Action != Abort || ds[0].Iteration > 3+3 {
		t.Fatalf("post-copy not allowed: decisions %+v, want one abort within 3 passes of the verdict", ds)
	}
	for _, want := range []string{"dirty 2.0 GiB/s vs transfer 130.0 MiB/s", "low point 383.2 MiB", "over the 500ms cap", "post-copy not allowed"} {
		if !strings.Contains(ds[0].Reason, want) {
			t.Errorf("abort reason lacks %q: %s", want, ds[0].Reason)
		}
	}

	ds = replay(t, act(500, true), sr, false)
	if len(ds) != 1 || ds[0].Action != Abort || !strings.Contains(ds[0].Reason, "not started with it") {
		t.Fatalf("post-copy allowed but not enabled: %+v", ds)
	}
}

func TestConvergingMigrationIsLeftAlone(t *testing.T) {
	sr := series{starts: []float64{510.8, 281.2, 182.9, 126.4, 92.5}, dirty: 32, transfer: 40,
		verdicts: verdicts(5, 3, api.VerdictConverging), elapsedPerPass: 5 * time.Second}
	if ds := replay(t, act(500, true), sr, true); len(ds) != 0 {
		t.Fatalf("decisions on a converging migration: %+v", ds)
	}
}

func TestSlowMigrationNearTheBackstopRampsTheDowntime(t *testing.T) {
	// 512 MiB at 150 s/GiB is a 75 s backstop; 20 s passes cross 80 % of it
	// at pass 3.
	starts := []float64{511, 300, 200, 150, 120}
	sr := series{starts: starts, dirty: 30, transfer: 40,
		verdicts: verdicts(5, 3, api.VerdictConverging), elapsedPerPass: 20 * time.Second}
	ds := replay(t, act(500, false), sr, false)
	if len(ds) == 0 {
		t.Fatal("no ramp step near the backstop")
	}
	last := 300 * time.Millisecond
	for _, d := range ds[:len(ds)-1] {
		if d.Action != RaiseDowntime || d.MaxDowntime <= last {
			t.Fatalf("ramp %+v: want rising raise-downtime steps", ds)
		}
		last = d.MaxDowntime
	}
	// Past the backstop, at 200 MiB on 40 MiB/s, nothing fits the cap.
	if end := ds[len(ds)-1]; end.Trigger != "deadline" || end.Action != Abort {
		t.Fatalf("at the backstop: %+v, want abort", end)
	}
}

// A driver that acts at the deadline itself (the owner of a migration
// Ferry drives) gets the ramp from the policy, never a second abort or
// switch of the policy's own at the same deadline.
func TestOwnedDeadlineIsLeftToItsOwner(t *testing.T) {
	starts := []float64{511, 300, 200, 150, 120}
	sr := series{starts: starts, dirty: 30, transfer: 40,
		verdicts: verdicts(5, 3, api.VerdictConverging), elapsedPerPass: 20 * time.Second}
	var m Memory
	for n := 1; n <= len(starts); n++ {
		d := Decide(act(500, false), Evidence{Job: sr.job(n), MaxDowntime: migration.DefaultMaxDowntime, Deadline: 75 * time.Second, DeadlineOwned: true}, &m)
		if d.Action == Abort || d.Action == PostCopy || d.Trigger == "deadline" {
			t.Fatalf("pass %d: %+v, want no action of the policy's own at an owned deadline", n, d)
		}
	}
}

func TestSwitchOverThatDidNotLandRaisesOnce(t *testing.T) {
	// QEMU's own bandwidth reading is 15 % under the tracker's.
	sr := series{starts: []float64{511.2, 201.0, 45.3, 37.2, 38.9, 37.9, 38.0}, dirty: 90, transfer: 100, qemuTransfer: 85,
		verdicts: verdicts(7, 4, api.VerdictStalled), elapsedPerPass: 2 * time.Second}
	ds := replay(t, act(1000, false), sr, false)
	if len(ds) < 2 || ds[0].Action != SwitchOver || ds[1].Action != RaiseDowntime || ds[1].MaxDowntime <= ds[0].MaxDowntime {
		t.Fatalf("decisions %+v, want a switch-over then a higher step", ds)
	}
}

func TestNoDecisionOutsideASourcePreCopy(t *testing.T) {
	sr := series{starts: []float64{511.7, 383.2, 384.0}, dirty: 2048, transfer: 130,
		verdicts: verdicts(3, 2, api.VerdictStalled)}
	var control Memory
	if d := Decide(act(500, true), Evidence{Job: sr.job(3), PostCopyEnabled: true}, &control); d.Action != PostCopy {
		t.Fatalf("the unedited job: %+v, want post-copy", d)
	}
	for name, edit := range map[string]func(*api.Job){
		"aborting":  func(j *api.Job) { j.AbortStatus = api.AbortAborting },
		"target":    func(j *api.Job) { j.Role = api.RoleTarget },
		"post-copy": func(j *api.Job) { j.Mode = api.ModePostCopy },
		"finished":  func(j *api.Job) { j.Phase = api.PhaseCompleted },
	} {
		j := sr.job(3)
		edit(&j)
		var m Memory
		if d := Decide(act(500, true), Evidence{Job: j, PostCopyEnabled: true}, &m); d.Action != None {
			t.Errorf("%s: %+v", name, d)
		}
	}
}

func TestSettings(t *testing.T) {
	if err := Defaults().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Settings{Mode: "steer", Scope: "some", MaxDowntime: 0}
	err := bad.Validate()
	for _, want := range []string{`mode "steer"`, `scope "some"`, "max downtime 0 ms"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want it to name %s", bad, err, want)
		}
	}
	s := act(500, true)
	if s.ModeFor(false) != Advise || s.ModeFor(true) != Act {
		t.Fatal("act must become advise on migrations Ferry does not drive")
	}
	s.Scope = ScopeAll
	if s.ModeFor(false) != Act {
		t.Fatal("scope all acts on every migration")
	}
	if d := Deadline(Defaults(), 2<<30); d != 300*time.Second {
		t.Fatalf("deadline for 2 GiB: %v", d)
	}
}

func TestNothingIsDecidedOnANewPassNotYetReadOrAStoppedLink(t *testing.T) {
	sr := series{starts: []float64{511.7, 383.2, 384.0}, dirty: 2048, transfer: 130,
		verdicts: verdicts(3, 2, api.VerdictStalled)}
	s := act(500, true)

	// Pass 3 has begun but no reading of it is in yet.
	j := sr.job(3)
	j.Iterations[2].MemoryRemainingBytes = 0
	var m Memory
	if d := Decide(s, Evidence{Job: j, PostCopyEnabled: true}, &m); d.Action != None || m.Iteration != 0 {
		t.Fatalf("decided %+v (memory %+v) on a pass not yet read", d, m)
	}
	if d := Decide(s, Evidence{Job: sr.job(3), PostCopyEnabled: true}, &m); d.Action != PostCopy {
		t.Fatalf("once read: %+v, want post-copy", d)
	}

	// A link moving nothing is no reason to switch or abort.
	j = sr.job(3)
	j.TransferRateBytesPerSecond = 0
	m = Memory{}
	if d := Decide(s, Evidence{Job: j, PostCopyEnabled: true}, &m); d.Action != None {
		t.Fatalf("decided %+v with nothing moving", d)
	}
}

func TestJustOverTheCapGetsOnePassAtTheCap(t *testing.T) {
	// ~23.5 MiB pinned on 48 MiB/s: 540 ms with headroom, over a 500 ms cap
	// by less than a quarter. At the cap QEMU, reading 48 MiB/s itself,
	// switches over; reading 44 MiB/s it does not, and the policy gives up.
	sr := series{starts: []float64{511.0, 60.2, 23.4, 23.6, 23.5, 23.7}, dirty: 40, transfer: 48,
		verdicts: verdicts(6, 4, api.VerdictStalled), elapsedPerPass: time.Second}
	ds := replay(t, act(500, false), sr, false)
	if len(ds) != 1 || ds[0].Action != RaiseDowntime || ds[0].MaxDowntime != 500*time.Millisecond {
		t.Fatalf("decisions %+v, want one step to the 500 ms cap", ds)
	}
	sr.qemuTransfer = 44
	ds = replay(t, act(500, false), sr, false)
	if len(ds) != 2 || ds[0].Action != RaiseDowntime || ds[1].Action != Abort || ds[1].Iteration != ds[0].Iteration+1 {
		t.Fatalf("decisions %+v, want one pass at the cap, then the abort", ds)
	}
}

func TestAutoConvergeStillRisingIsLeftToQEMU(t *testing.T) {
	sr := series{starts: []float64{511.7, 383.2, 384.0, 383.6}, dirty: 2048, transfer: 130,
		verdicts: verdicts(4, 3, api.VerdictStalled)}
	j := sr.job(3)
	j.AutoConvergeThrottle = 40
	var m Memory
	if d := Decide(act(500, false), Evidence{Job: j}, &m); d.Action != None {
		t.Fatalf("acted while auto-converge was still raising its throttle: %+v", d)
	}
	j = sr.job(4)
	j.AutoConvergeThrottle = 99
	if d := Decide(act(500, false), Evidence{Job: j}, &m); d.Action != Abort {
		t.Fatalf("throttle at its cap: %+v, want the abort", d)
	}
}
