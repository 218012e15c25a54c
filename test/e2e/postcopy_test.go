//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

func TestPostCopySwitchThenCompleted(t *testing.T) {
	supported(t, "driven-postcopy", postCopyInto(t, "b"))
	guest(t, testbed.GuestSpec{Name: "pc", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
	start := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: "pc", From: "a", To: "b", PostCopyAfter: 3 * time.Second, BandwidthMiBs: holdMiBs})
	var sawSource, sawTarget bool
	waitFor(t, "post-copy on both nodes", 2*time.Minute, func() bool {
		if j, ok := ferryOn("a").job("pc"); ok && j.Mode == api.ModePostCopy {
			sawSource = true
		}
		if j, ok := ferryOn("b").job("pc"); ok && j.Mode == api.ModePostCopy {
			sawTarget = true
		}
		return sawSource && sawTarget
	})
	if err := <-done; err != nil {
		t.Fatalf("post-copy migration failed: %v", err)
	}
	src := waitJob(t, "a", "pc", "Completed", 15*time.Second, completed)
	dst := waitJob(t, "b", "pc", "Completed", 15*time.Second, completed)
	if src.Mode != api.ModePostCopy || dst.Mode != api.ModePostCopy {
		t.Fatalf("final modes: source %s, target %s", src.Mode, dst.Mode)
	}
	t.Logf("source: %d iterations, %d post-copy requests; target completed %s after start",
		src.Iteration, src.PostCopyRequests, dst.EndTime.Sub(dst.StartTime).Round(time.Millisecond))
	assertTruth(t, "pc", "a", "b", start)
}

type lifecycleEvent struct {
	event, detail int32
	at            time.Time
}

// watchLifecycle records a domain's lifecycle events on a node, straight
// from libvirt, to time Ferry's reaction against.
func watchLifecycle(t *testing.T, node, domain string) <-chan lifecycleEvent {
	t.Helper()
	l, err := bed.Libvirt(node)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := l.SubscribeEvents(ctx, libvirt.DomainEventIDLifecycle, libvirt.OptDomain{})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan lifecycleEvent, 64)
	go func() {
		for raw := range ch {
			if m, ok := raw.(*libvirt.DomainEventCallbackLifecycleMsg); ok && m.Msg.Dom.Name == domain {
				select {
				case out <- lifecycleEvent{m.Msg.Event, m.Msg.Detail, time.Now()}:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		l.Disconnect()
	})
	return out
}

func waitEvent(t *testing.T, ch <-chan lifecycleEvent, event, detail int32, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case e := <-ch:
			if e.event == event && e.detail == detail {
				return e.at
			}
		case <-deadline:
			t.Fatalf("libvirt never sent lifecycle event %d/%d within %v", event, detail, timeout)
		}
	}
}

func TestPostCopyFailureIsReportedOnBothNodes(t *testing.T) {
	postCopyInto(t, "b")
	supported(t, "postcopy-failure", "yes")
	guest(t, testbed.GuestSpec{Name: "pcf", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
	// Sampling every 30 s leaves libvirt's events as the only way to meet
	// the 2 s limit below: a tracker that ignored them would miss it. No
	// recovery: the failure is declared at once, as KubeVirt's would be.
	ferrydArgs(t, "--sample-interval", "30s", "--postcopy-recovery-timeout", "0")
	evA := watchLifecycle(t, "a", "pcf")
	evB := watchLifecycle(t, "b", "pcf")
	// Slow post-copy down so the reset lands before it completes.
	start := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: "pcf", From: "a", To: "b", PostCopyAfter: 3 * time.Second, BandwidthMiBs: holdMiBs, PostCopyBandwidthMiBs: 32})

	waitEvent(t, evA, 3, 7, 2*time.Minute) // suspended/post-copy: the switch happened
	// Let QEMU's post-copy stream get going: a reset in the very first
	// instant can reach libvirt's control connection before QEMU notices.
	time.Sleep(time.Second)
	alertCheck := postCopyAlertWatch(t, "pcf", "a", "b")
	if err := bed.ResetMigration(); err != nil {
		t.Fatalf("reset-migration: %v", err)
	}
	srcEvent := waitEvent(t, evA, 3, 8, time.Minute) // suspended/post-copy-failed
	dstEvent := waitEvent(t, evB, 4, 4, time.Minute) // resumed/post-copy-failed

	postCopyFailed := func(j api.Job) bool { return j.Phase == api.PhasePostCopyFailed }
	srcSeen := waitJob(t, "a", "pcf", "PostCopyFailed", 10*time.Second, postCopyFailed)
	srcJSON := time.Now()
	dstSeen := waitJob(t, "b", "pcf", "PostCopyFailed", 10*time.Second, postCopyFailed)
	dstJSON := time.Now()
	srcMetric := waitFor(t, "source post-copy failure in metrics", 10*time.Second, func() bool {
		v, ok := ferryOn("a").metric("ferry_migrations_total", `role="source"`, `result="postcopy_failed"`)
		return ok && v >= 1
	})
	dstMetric := waitFor(t, "target post-copy failure in metrics", 10*time.Second, func() bool {
		v, ok := ferryOn("b").metric("ferry_domain_attention", `domain="pcf"`, `reason="postcopy_failed"`)
		return ok && v == 1
	})
	for _, c := range []struct {
		what     string
		from, to time.Time
	}{
		{"source job JSON", srcEvent, srcJSON}, {"target job JSON", dstEvent, dstJSON},
		{"source metrics", srcEvent, srcMetric}, {"target metrics", dstEvent, dstMetric},
	} {
		lat := c.to.Sub(c.from)
		t.Logf("%s shows post-copy failed %v after libvirt's event", c.what, lat.Round(time.Millisecond))
		if lat > 2*time.Second {
			t.Errorf("%s took %v after libvirt's event (limit 2s)", c.what, lat)
		}
	}

	alertCheck()

	var src, dst api.Job
	ctlJSON(t, "a", &src, "job", "pcf")
	ctlJSON(t, "b", &dst, "job", "pcf")
	if src.Phase != api.PhasePostCopyFailed || src.Role != api.RoleSource || src.DomainState != "paused/post-copy-failed" {
		t.Errorf("ferryctl on a: phase %s role %s state %q", src.Phase, src.Role, src.DomainState)
	}
	if dst.Phase != api.PhasePostCopyFailed || dst.Role != api.RoleTarget {
		t.Errorf("ferryctl on b: phase %s role %s state %q", dst.Phase, dst.Role, dst.DomainState)
	}
	assertClass(t, src, api.PlaneData, api.ClassPostCopyFailed)
	assertClass(t, dst, api.PlaneData, api.ClassPostCopyFailed)
	if st, rs := domainState(t, "a", "pcf"); st != 3 || rs != 13 {
		t.Errorf("libvirt on a: state %d/%d, want paused/post-copy-failed 3/13", st, rs)
	}
	if st, rs := domainState(t, "b", "pcf"); st != 1 || rs != 11 {
		t.Errorf("libvirt on b: state %d/%d, want running/post-copy-failed 1/11", st, rs)
	}
	t.Logf("source: %s\ntarget: %s", srcSeen.FailureReason, dstSeen.FailureReason)
	select {
	case err := <-done:
		t.Logf("migrate call returned: %v", err)
	case <-time.After(30 * time.Second):
		t.Log("migrate call still blocked 30s after the failure")
	}
	assertTruth(t, "pcf", "a", "b", start)
}

// ferrydArgs restarts both ferryds with extra flags, for the rest of the
// test.
func ferrydArgs(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, n := range []string{"a", "b"} {
			if err := bed.SetNodeFerrydArgs(ctx, n); err != nil {
				t.Errorf("restoring ferryd on %s: %v", n, err)
			}
		}
	})
	for _, n := range []string{"a", "b"} {
		if err := bed.SetNodeFerrydArgs(ctx, n, args...); err != nil {
			t.Fatal(err)
		}
	}
}
