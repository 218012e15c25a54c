//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/test/testbed"
)

// pcRun is a post-copy migration under test, and the counts before it.
type pcRun struct {
	name    string
	before  int // the guest's memory checks
	start   time.Time
	done    <-chan error
	failed  map[string]float64 // ferry_migrations_total{result="postcopy_failed"} by node
	resumed float64            // the source's resumed attempts
	evA     <-chan lifecycleEvent
}

// breakablePostCopy starts a driven migration of a verifying guest that
// switches to post-copy at once and stays there a while (its post-copy
// capped), and returns once the source is in post-copy.
func breakablePostCopy(t *testing.T, name string) pcRun {
	t.Helper()
	return breakable(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 4, Verify: true})
}

func breakable(t *testing.T, g testbed.GuestSpec) pcRun {
	t.Helper()
	name := g.Name
	postCopyInto(t, "b")
	guest(t, g)
	r := pcRun{name: name, before: verifiedSoFar(t, name), failed: map[string]float64{},
		resumed: metricSum("a", "ferry_migration_postcopy_recovery_attempts_total", `result="resumed"`)}
	for _, n := range []string{"a", "b"} {
		r.failed[n] = metricSum(n, "ferry_migrations_total", `result="postcopy_failed"`)
	}
	evA := watchLifecycle(t, "a", name)
	r.evA = evA
	r.start = time.Now()
	r.done = migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: holdMiBs,
		PostCopyAfter: 2 * time.Second, PostCopyBandwidthMiBs: 8, Policy: "observe"})
	waitEvent(t, evA, 3, 7, 2*time.Minute) // suspended/post-copy: the switch happened
	// Let QEMU's post-copy stream get going before it is broken.
	time.Sleep(time.Second)
	return r
}

// pausedOnBoth waits for the driven job to have shown the pause on both
// nodes (a resume can follow within a second: the event stays).
func pausedOnBoth(t *testing.T, name string, within time.Duration) {
	t.Helper()
	paused := func(j api.Job) bool { return j.Recovery != nil && hasEvent(j, "postcopy-paused") }
	src := waitJob(t, "a", name, "PostCopyPaused", within, paused)
	waitJob(t, "b", name, "PostCopyPaused", within, paused)
	if time.Until(src.Recovery.Until) < 3*time.Minute {
		t.Errorf("the recovery ends %v from now, want the default 5 minutes from the pause", time.Until(src.Recovery.Until))
	}
}

// resumedToTheEnd waits for the migration to complete after its
// recovery, then checks what libvirt and the guest say on both nodes.
func resumedToTheEnd(t *testing.T, r pcRun, resumes int) {
	t.Helper()
	name := r.name
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("the migration did not complete: %v", err)
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("the migration did not end within 5 minutes")
	}
	src := waitJob(t, "a", name, "Completed", 30*time.Second, completed)
	if src.Recovery == nil || src.Recovery.Resumed < resumes {
		t.Fatalf("the job's recovery %+v, want %d resumes", src.Recovery, resumes)
	}
	var paused, resumed int
	for _, e := range src.Events {
		switch {
		case e.Kind == "postcopy-paused":
			paused++
		case e.Kind == "recovery" && strings.Contains(e.Detail, "resumed the migration"):
			resumed++
		}
	}
	if paused == 0 || resumed < resumes {
		t.Errorf("the job's events show %d pauses and %d resumes, want the pause and %d resumes: %+v", paused, resumed, resumes, src.Events)
	}
	// libvirt completed the migration on both nodes by itself: gone (or
	// shut off) as migrated here, running as migrated there.
	libvirtShows(t, name, "as a completed migration leaves it", nodeTruth.migratedAway, nodeTruth.migratedHere)
	for _, n := range []string{"a", "b"} {
		// A ferryd restarted since counts from zero.
		if now := metricSum(n, "ferry_migrations_total", `result="postcopy_failed"`); now != r.failed[n] && now != 0 {
			t.Errorf("node %s counts %v post-copy failures, %v before the migration: want none more", n, now, r.failed[n])
		}
	}
	// A source ferryd restarted since counts from zero.
	if v := metricSum("a", "ferry_migration_postcopy_recovery_attempts_total", `result="resumed"`); v < float64(resumes) && v-r.resumed < float64(resumes) {
		t.Errorf("the source counts %v resumed attempts, want %d more than %v", v, resumes, r.resumed)
	}
	endsWholeOn(t, name, "b", "a", r.before, r.start)
}

// The streams of a post-copy are reset twice in a row: each time QEMU
// pauses the migration on both nodes and Ferry resumes it over fresh
// streams, and it completes, the guest's memory whole.
func TestPostCopyResetTwiceIsResumedTwice(t *testing.T) {
	supported(t, "postcopy-reset-twice", "yes")
	const name = "pcr-reset"
	r := breakablePostCopy(t, name)
	if err := bed.ResetMigration(); err != nil {
		t.Fatalf("reset-migration: %v", err)
	}
	pausedOnBoth(t, name, time.Minute)
	waitJob(t, "a", name, "resumed once", time.Minute, func(j api.Job) bool { return j.Recovery != nil && j.Recovery.Resumed >= 1 })
	// Soon, while the resumed post-copy still has most of its way to go.
	time.Sleep(200 * time.Millisecond)
	if err := bed.ResetMigration(); err != nil {
		t.Fatalf("second reset-migration: %v", err)
	}
	waitJob(t, "a", name, "resumed twice", 2*time.Minute, func(j api.Job) bool { return j.Recovery != nil && j.Recovery.Resumed >= 2 })
	resumedToTheEnd(t, r, 2)
}

// The migration link is cut for longer than the proxy's TCP user timeout
// (30 s), so the streams break and QEMU pauses the post-copy on both
// nodes; once the link is back Ferry resumes it, and it completes.
func TestPostCopyResumesAfterALinkCut(t *testing.T) {
	const name = "pcr-cut"
	r := breakablePostCopy(t, name)
	if err := bed.CutLink(); err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			bed.RestoreLink()
		}
	}()
	cut := time.Now()
	waitJob(t, "a", name, "PostCopyPaused", 90*time.Second, func(j api.Job) bool { return j.Phase == api.PhasePostCopyPaused })
	time.Sleep(time.Until(cut.Add(45 * time.Second)))
	if err := bed.RestoreLink(); err != nil {
		t.Fatal(err)
	}
	restored = true
	back := time.Now()
	pausedOnBoth(t, name, time.Minute)
	j := waitJob(t, "a", name, "resumed", 2*time.Minute, func(j api.Job) bool { return j.Recovery != nil && j.Recovery.Resumed >= 1 })
	for _, e := range j.Events {
		if e.Kind == "recovery" && strings.Contains(e.Detail, "resumed") {
			t.Logf("resumed %v after the link came back: %s", e.Time.Sub(back).Round(time.Millisecond), e.Detail)
		}
	}
	resumedToTheEnd(t, r, 1)
	resumeLeftOnTarget(t, r)
}

// resumeLeftOnTarget checks, on the target's libvirt, by which route the
// broken post-copy was resumed: by libvirt's own protocol wherever that
// libvirt does not crash on it, which leaves no monitor of Ferry's in the
// guest's live XML and no taint; through Ferry's monitor on libvirt 11.2
// and 11.3, which libvirt reports as a taint.
func resumeLeftOnTarget(t *testing.T, r pcRun) {
	t.Helper()
	name := r.name
	var version uint64
	var live string
	var taints []string
	withLibvirt(t, "b", func(l *libvirt.Libvirt) error {
		var err error
		if version, err = l.ConnectGetLibVersion(); err != nil {
			return err
		}
		dom, err := l.DomainLookupByName(name)
		if err != nil {
			return err
		}
		if live, err = l.DomainGetXMLDesc(dom, 0); err != nil {
			return err
		}
		all, err := l.DomainGetMessages(dom, uint32(libvirt.DomainMessageTainting))
		for _, m := range all {
			// Ferry's own, not the bed's (QEMU as root is high-privileges).
			if strings.Contains(m, "custom-monitor") || strings.Contains(m, "custom-argv") {
				taints = append(taints, m)
			}
		}
		return err
	})
	monitor := strings.Contains(live, "ferry-recovery")
	if !libvirtx.ResumesPostCopy(version) {
		supported(t, "postcopy-resumed", "yes, through Ferry's QMP monitor (libvirt 11.2 and 11.3 crash on their own resume)")
		if !monitor {
			t.Errorf("libvirt %s on the target crashes on its own resume, yet the guest has no monitor of Ferry's to resume by", libvirtx.VersionString(version))
		}
		return
	}
	supported(t, "postcopy-resumed", "yes, by libvirt's own protocol: no monitor, no taint on the target")
	if monitor || len(taints) > 0 {
		t.Errorf("libvirt %s on the target resumes post-copy itself, yet the guest has Ferry's monitor (%v) or taints %q", libvirtx.VersionString(version), monitor, taints)
	}
	// The resume's Finish and Confirm ran to the end: a Confirm that took
	// the resumed migration for failed would have had libvirt hold the
	// source failed again (and the job show a second pause).
	failedEvents := 0
	for drained := false; !drained; {
		select {
		case e := <-r.evA:
			if e.event == int32(libvirt.DomainEventSuspended) && e.detail == int32(libvirt.DomainEventSuspendedPostcopyFailed) {
				failedEvents++
			}
		default:
			drained = true
		}
	}
	if failedEvents != 1 {
		t.Errorf("libvirt on the source held the post-copy failed %d times for one break", failedEvents)
	}
	src := waitJob(t, "a", name, "Completed", 30*time.Second, completed)
	pauses := 0
	for _, e := range src.Events {
		if e.Kind == "postcopy-paused" {
			pauses++
		}
	}
	if pauses != 1 {
		t.Errorf("the source's job shows %d pauses for one break: %+v", pauses, src.Events)
	}
	t.Logf("resumed by libvirt %s's own protocol: no monitor, no taint on the target", libvirtx.VersionString(version))
}

// The link stays cut past the recovery timeout: at its deadline the pause
// is overdue on both nodes (the series FerryPostCopyRecoveryOverdue fires
// on), nothing gives up by itself, not even the target, which hears of no
// attempt meanwhile; once the link comes back, the migration resumes and
// completes, and the VMI is never marked irrecoverable.
func TestPostCopyCutPastTheRecoveryTimeoutAlertsAndResumes(t *testing.T) {
	kubeUp(t)
	const vmi, name = "pcrlate", "default_pcrlate"
	const timeout = 20 * time.Second
	uid := createVMI(t, vmi)
	ferrydArgs(t, "--postcopy-recovery-timeout", timeout.String())
	r := breakable(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 4, VMIUID: uid, Verify: true})
	if err := bed.CutLink(); err != nil {
		t.Fatal(err)
	}
	defer bed.RestoreLink()
	src := waitJob(t, "a", name, "PostCopyPaused", 90*time.Second, func(j api.Job) bool { return j.Phase == api.PhasePostCopyPaused })
	deadline := src.Recovery.Until
	outbound := func() float64 { return metricSum("a", "ferry_migration_slots_used", `direction="outbound"`) }
	if v := outbound(); v < 1 {
		t.Errorf("the paused migration holds %v outbound slots on its source, want its one", v)
	}
	for _, n := range []string{"a", "b"} {
		// The alert's series: its deadline, on each node.
		waitFor(t, "node "+n+"'s recovery deadline series", 30*time.Second, func() bool {
			v := metricSum(n, "ferry_migration_postcopy_recovery_deadline_timestamp_seconds", `domain="`+name+`"`)
			return v > 0 && math.Abs(v-float64(deadline.UnixMilli())/1000) < timeout.Seconds()
		})
	}
	overdue := func(j api.Job) bool { return j.Recovery != nil && j.Recovery.Overdue }
	src = waitJob(t, "a", name, "overdue", deadline.Sub(time.Now())+time.Minute, overdue)
	// The target's old clock gave up at the timeout plus 30 s.
	dst := waitJob(t, "b", name, "overdue", deadline.Sub(time.Now())+time.Minute, overdue)
	time.Sleep(5 * time.Second)
	for _, n := range []string{"a", "b"} {
		if j, ok := ferryOn(n).job(name); !ok || j.Phase != api.PhasePostCopyPaused {
			t.Fatalf("node %s's job is %s past the deadline, want still PostCopyPaused: %s", n, j.Phase, j.FailureReason)
		}
		if time.Now().Unix() < int64(metricSum(n, "ferry_migration_postcopy_recovery_deadline_timestamp_seconds", `domain="`+name+`"`)) {
			t.Errorf("node %s's deadline series is not past: the alert would not fire", n)
		}
	}
	waitFor(t, "the overdue migration's outbound slot going to others", 30*time.Second, func() bool { return outbound() == 0 })
	t.Logf("overdue on the source %v and the target %v after the deadline; %d attempts so far",
		time.Since(deadline).Round(time.Second), dst.UpdateTime.Sub(deadline).Round(time.Second), src.Recovery.Attempts)
	bed.RestoreLink()
	back := time.Now()
	resumedToTheEnd(t, r, 1)
	t.Logf("completed %v after the link came back", time.Since(back).Round(time.Second))
	for _, n := range []string{"a", "b"} {
		if v := metricSum(n, "ferry_migrations_total", `result="postcopy_failed"`) - r.failed[n]; v != 0 {
			t.Errorf("node %s counts %v post-copy failures, want none", n, v)
		}
	}
	u := getVMI(t, vmi)
	if ok, _ := marked(t, u); ok {
		t.Error("the VMI was marked irrecoverable though its migration completed")
	}
	var last string
	waitFor(t, "the VMI's recovery annotation to say resumed, or be gone", 30*time.Second, func() bool {
		ann, set := getVMI(t, vmi).GetAnnotations()[kubevirt.RecoveryAnnotation]
		var rs kubevirt.RecoveryState
		last = ann
		return !set || json.Unmarshal([]byte(ann), &rs) == nil && rs.State == "resumed"
	})
	t.Logf("the VMI's recovery annotation at the end: %q", last)
}

// An operator gives up a paused post-copy's recovery while its link is
// cut: the source's job ends PostCopyFailed, both copies stay held. The
// node was not gone for good after all: once the link is back, ferryctl
// recover starts the recovery again, and the migration completes whole.
func TestAGivenUpPostCopyRecoveryStartsAgainOnRecover(t *testing.T) {
	const name = "pcr-rearm"
	r := breakablePostCopy(t, name)
	if err := bed.CutLink(); err != nil {
		t.Fatal(err)
	}
	defer bed.RestoreLink()
	// The tracker shows the pause as libvirt reports it; the driver's
	// recovery, which give-up speaks to, starts when the finish sees it.
	waitJob(t, "a", name, "a recovery attempt", 2*time.Minute, func(j api.Job) bool {
		return j.Phase == api.PhasePostCopyPaused && j.Recovery != nil && j.Recovery.Attempts >= 1
	})
	var msg api.MessageResponse
	ctlJSON(t, "a", &msg, "give-up", name)
	src := waitJob(t, "a", name, "PostCopyFailed", time.Minute, func(j api.Job) bool { return j.Phase == api.PhasePostCopyFailed })
	if !strings.Contains(src.FailureReason, "gave up") {
		t.Errorf("the source's reason does not say an operator gave up: %q", src.FailureReason)
	}
	select {
	case err := <-r.done:
		if err == nil {
			t.Fatal("the migration reported success though its recovery was given up")
		}
	case <-time.After(time.Minute):
		t.Fatal("the migration call did not return after the give-up")
	}
	libvirtShows(t, name, "held post-copy-failed", nodeTruth.postCopyFailedSource, nodeTruth.postCopyFailedTarget)
	bed.RestoreLink()
	time.Sleep(2 * time.Second)
	ctlJSON(t, "a", &msg, "recover", name)
	t.Logf("ferryctl recover: %s", msg.Message)
	waitJob(t, "a", name, "resumed", 2*time.Minute, func(j api.Job) bool { return j.Recovery != nil && j.Recovery.Resumed >= 1 })
	waitJob(t, "a", name, "Completed", 5*time.Minute, completed)
	libvirtShows(t, name, "as a completed migration leaves it", nodeTruth.migratedAway, nodeTruth.migratedHere)
	if v := metricSum("a", "ferry_migrations_total", `result="postcopy_failed"`) - r.failed["a"]; v != 1 {
		t.Errorf("the source counts %v post-copy failures, want the one given up", v)
	}
	endsWholeOn(t, name, "b", "a", r.before, r.start)
}

// The source's copy of a paused post-copy is destroyed while the link is
// cut (a transient guest: libvirt forgets it). Its recovery must not take
// the vanished guest for one that completed: the target never said it runs
// whole, so the migration fails, the guest lost, and nothing says
// Completed.
func TestAPostCopyWhoseSourceVanishesDuringRecoveryFails(t *testing.T) {
	const name = "pcr-vanish"
	r := breakablePostCopy(t, name)
	if err := bed.CutLink(); err != nil {
		t.Fatal(err)
	}
	defer bed.RestoreLink()
	waitJob(t, "a", name, "PostCopyPaused", 90*time.Second, func(j api.Job) bool { return j.Phase == api.PhasePostCopyPaused })
	withLibvirt(t, "a", func(l *libvirt.Libvirt) error {
		dom, err := l.DomainLookupByName(name)
		if err == nil {
			err = l.DomainDestroy(dom)
		}
		return err
	})
	bed.RestoreLink()
	select {
	case err := <-r.done:
		if err == nil {
			t.Fatal("the migration reported success though its source's copy was destroyed mid-recovery")
		}
	case <-time.After(4 * time.Minute):
		t.Fatal("the migration call did not return")
	}
	// The driver asks the target for as long as a completed migration
	// takes to settle there, then fails it.
	waitFor(t, "the source's driver failing the migration as vanished", 4*time.Minute, func() bool {
		return ferrydLogLine("a", `"domain":"`+name+`"`, "the guest vanished from this node's libvirt during its recovery")
	})
	if ferrydLogLine("a", `"domain":"`+name+`"`, "Ferry-driven migration completed") {
		t.Error("the source's driver took the vanished guest for a completed migration")
	}
	if j, ok := ferryOn("a").job(name); ok && j.Phase == api.PhaseCompleted {
		t.Errorf("the source's job says Completed: %s", j.FailureReason)
	}
	got, err := readNodeTruth("b", name)
	if err != nil {
		t.Fatal(err)
	}
	if got.running() && !got.postCopyFailedTarget() {
		t.Errorf("libvirt on b runs the guest as whole, which it cannot be: %s", got)
	}
	t.Logf("libvirt on b: %s", got)
}

// A ferryd SIGKILLed in post-copy takes the migration's streams with it,
// and QEMU pauses the migration on both nodes. Started again, it finds
// what it recorded, and the migration is resumed and completes.
func TestPostCopyResumedAfterAFerrydIsKilled(t *testing.T) {
	supported(t, "postcopy-ferryd-killed", "yes")
	for _, node := range []string{"b", "a"} {
		t.Run("node "+node, func(t *testing.T) {
			name := "pcr-kill-" + node
			r := breakablePostCopy(t, name)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := bed.CrashFerryd(ctx, node); err != nil {
				t.Fatal(err)
			}
			pausedOnBoth(t, name, time.Minute)
			waitJob(t, "a", name, "resumed", 2*time.Minute, func(j api.Job) bool { return j.Recovery != nil && j.Recovery.Resumed >= 1 })
			resumedToTheEnd(t, r, 1)
		})
	}
}

// The source's libvirtd restarts during a KubeVirt-style migration's
// post-copy (libvirt's own, peer to peer, through the bed's relays).
// libvirt reports the post-copy failed; before recording it, Ferry asks
// the source's QEMU, through libvirt, whether its stream broke (libvirt
// says the same when only the migration's API call failed and QEMU streams
// on). Here QEMU paused it: the failure is recorded on QEMU's word, once.
func TestASourcesPostCopyFailureIsTakenOnQEMUsWord(t *testing.T) {
	const name = "pc-api"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 4})
	failed := metricSum("a", "ferry_migrations_total", `result="postcopy_failed"`)
	evA := watchLifecycle(t, "a", name)
	start := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "socat", BandwidthMiBs: holdMiBs,
		PostCopyAfter: 2 * time.Second, PostCopyBandwidthMiBs: 8})
	waitEvent(t, evA, 3, 7, 2*time.Minute) // suspended/post-copy
	time.Sleep(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.RestartLibvirtd(ctx, "a"); err != nil {
		t.Fatalf("restarting libvirtd on a: %v", err)
	}
	<-done
	src := waitJob(t, "a", name, "PostCopyFailed", time.Minute, func(j api.Job) bool { return j.Phase == api.PhasePostCopyFailed })
	if !strings.Contains(src.FailureReason, "(QEMU: "+"postcopy-paused)") {
		t.Errorf("the failure was not taken on QEMU's word: %q", src.FailureReason)
	}
	var asked bool
	for _, e := range src.Events {
		asked = asked || e.Kind == "postcopy-unconfirmed" && strings.Contains(e.Detail, "asking QEMU")
	}
	if !asked {
		t.Errorf("the job's events do not show QEMU asked: %+v", src.Events)
	}
	time.Sleep(3 * time.Second)
	if v := metricSum("a", "ferry_migrations_total", `result="postcopy_failed"`) - failed; v != 1 {
		t.Errorf("the source counts %v post-copy failures, want exactly one", v)
	}
	libvirtShows(t, name, "held post-copy-failed", nodeTruth.postCopyFailedSource, nodeTruth.postCopyFailedTarget)
	t.Logf("recorded %v after the migration began: %s", time.Since(start).Round(time.Millisecond), src.FailureReason)
}

// libvirtShows fails unless libvirt shows the guest on a as onA says and
// on b as onB says.
func libvirtShows(t *testing.T, name, what string, onA, onB func(nodeTruth) bool) {
	t.Helper()
	for node, want := range map[string]func(nodeTruth) bool{"a": onA, "b": onB} {
		got, err := readNodeTruth(node, name)
		if err != nil {
			t.Fatal(err)
		}
		if !want(got) {
			t.Errorf("libvirt on %s: %s, not %s", node, got, what)
		}
	}
}
