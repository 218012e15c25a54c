//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/test/testbed"
)

// TestKubeVirtLaunchers runs ferryd as deploy/'s DaemonSet runs it, with no
// socket flags, on nodes whose only libvirts are virt-launcher pods laid
// out as KubeVirt and the kubelet lay them out: session daemons as 107,
// sockets at 121 bytes under /var/lib/kubelet/pods. ferryd must find them
// itself, follow a migration between two launchers on both nodes, map both
// sides to the VMI of KubeVirt's real CRD, and mark it when post-copy fails.
func TestKubeVirtLaunchers(t *testing.T) {
	supported(t, "launcher", "yes")
	kubeUp(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args, caps := daemonSetArgs(t)
	if err := bed.SetFerrydOwnArgs(ctx, caps, args...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := bed.SetFerrydOwnArgs(ctx, nil); err != nil {
			t.Errorf("restoring the bed's ferryds: %v", err)
		}
	})

	t.Run("pre-copy", func(t *testing.T) {
		src, dst, uid := launcherPair(t, "lpre", testbed.LauncherSpec{MemoryMiB: 256, DirtyMiB: 128, DirtyRateMiBs: 8})
		qemuPID, err := src.QEMUPID()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := bed.MigrateLauncher(ctx, testbed.LauncherMigration{From: src, To: dst, BandwidthMiBs: 32}); err != nil {
			t.Fatal(err)
		}
		wantLauncherState(t, src, libvirt.DomainShutoff, int32(libvirt.DomainShutoffMigrated))
		wantLauncherState(t, dst, libvirt.DomainRunning, int32(libvirt.DomainRunningMigrated))
		var target api.Job
		for _, l := range []*testbed.Launcher{src, dst} {
			j := waitJob(t, l.Node, l.Domain, "Completed with its VMI", 30*time.Second, func(j api.Job) bool {
				return j.Phase == api.PhaseCompleted && j.VMI != nil
			})
			checkLauncherJob(t, j, l, uid)
			target = j
		}
		// The target job's figures are libvirt's own, from the target
		// launcher's completed-job statistics.
		done := launcherCompleted(t, dst)
		if target.DataTotalBytes != done.DataTotal || target.DataProcessedBytes != done.DataProcessed || target.DowntimeMs != done.DowntimeMs {
			t.Errorf("target job: data %d of %d, downtime %d ms; the target launcher's libvirt: data %d of %d, downtime %d ms",
				target.DataProcessedBytes, target.DataTotalBytes, target.DowntimeMs, done.DataProcessed, done.DataTotal, done.DowntimeMs)
		}
		// A completed migration leaves the VMI as it was.
		if ok, f := marked(t, getVMI(t, "lpre")); ok {
			t.Errorf("the VMI of a completed migration is marked: %+v", f)
		}
		var src0 api.Job
		ctlJSON(t, "a", &src0, "job", src.Domain)
		if src0.Iteration < 1 || src0.DataTotalBytes == 0 || src0.DataProcessedBytes == 0 {
			t.Errorf("the source job carries no figures from libvirt's job statistics: iteration %d, data %d of %d", src0.Iteration, src0.DataProcessedBytes, src0.DataTotalBytes)
		}
		// The launcher's QEMU is found from its session daemon's pid file.
		if q := src0.QEMU; q == nil || q.PID != qemuPID || q.CPUUsageSeconds <= 0 {
			t.Errorf("no CPU figures of the launcher's QEMU (pid %d) on the source job: %+v", qemuPID, q)
		}
		t.Run("a hostile socket beside it", func(t *testing.T) { testHostileSocket(t, src) })
	})

	t.Run("pods of another libvirt", func(t *testing.T) { testLaunchersOfAnotherStack(t) })

	t.Run("post-copy failure marks the VMI", func(t *testing.T) {
		src, dst, uid := launcherPair(t, "lpc", testbed.LauncherSpec{MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- bed.MigrateLauncher(ctx, testbed.LauncherMigration{From: src, To: dst,
				PostCopyAfter: 3 * time.Second, BandwidthMiBs: holdMiBs, PostCopyBandwidthMiBs: 32})
		}()
		waitFor(t, "the source in post-copy", 2*time.Minute, func() bool {
			s, r, err := src.State()
			return err == nil && s == int32(libvirt.DomainPaused) && r == int32(libvirt.DomainPausedPostcopy)
		})
		time.Sleep(time.Second)
		if err := bed.ResetMigration(); err != nil {
			t.Fatalf("reset-migration: %v", err)
		}
		if err := <-done; err == nil {
			t.Fatal("the migration succeeded though its post-copy streams were cut")
		}
		wantLauncherState(t, src, libvirt.DomainPaused, int32(libvirt.DomainPausedPostcopyFailed))
		wantLauncherState(t, dst, libvirt.DomainRunning, int32(libvirt.DomainRunningPostcopyFailed))
		waitFor(t, "the VMI marked irrecoverable on the API server", 30*time.Second, func() bool {
			ok, _ := marked(t, getVMI(t, "lpc"))
			return ok
		})
		u := getVMI(t, "lpc")
		_, f := marked(t, u)
		if f.Message != kubevirt.IrrecoverableMessage || f.MigrationUID != "mig-lpc" || (f.Node != "a" && f.Node != "b") {
			t.Errorf("annotation %+v", f)
		}
		for _, l := range []*testbed.Launcher{src, dst} {
			j := waitJob(t, l.Node, l.Domain, "PostCopyFailed with its VMI", 30*time.Second, func(j api.Job) bool {
				return j.Phase == api.PhasePostCopyFailed && j.VMI != nil && j.VMI.Irrecoverable
			})
			checkLauncherJob(t, j, l, uid)
		}
	})
}

// daemonSetArgs are deploy/daemonset.yaml's arguments for ferryd, but
// --kubelet-pods-dir: the bed has no /pods mount (it would have to make
// /pods on the host), so ferryd keeps its default, the kubelet's own
// /var/lib/kubelet/pods, where a launcher's socket is 121 bytes. caps are
// the capabilities its securityContext adds, the only ones ferryd keeps.
func daemonSetArgs(t *testing.T) (args, caps []string) {
	t.Helper()
	c := daemonSet(t).Spec.Template.Spec.Containers[0]
	for _, a := range c.Args {
		if !strings.HasPrefix(a, "--kubelet-pods-dir") {
			args = append(args, a)
		}
	}
	if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil {
		for _, c := range sc.Capabilities.Add {
			caps = append(caps, string(c))
		}
	}
	if len(caps) == 0 {
		t.Fatal("the DaemonSet adds no capability: ferryd could not open a launcher's 0700 socket")
	}
	return args, caps
}

// launcherPair creates a VMI as KubeVirt's controller has it during a
// migration from a to b (its source and target launcher pods both active),
// and starts both launchers: the source running the guest, the target
// empty. It returns them and the VMI's UID.
func launcherPair(t *testing.T, name string, g testbed.LauncherSpec) (src, dst *testbed.Launcher, vmiUID string) {
	t.Helper()
	srcPod, dstPod := uuid.NewString(), uuid.NewString()
	vmiUID = createVMIWithPods(t, name, map[string]any{srcPod: "a", dstPod: "b"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g.Node, g.Namespace, g.Name, g.VMIUID, g.PodUID = "a", "default", name, vmiUID, srcPod
	src, err := bed.StartLauncher(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Stop() })
	dst, err = bed.StartLauncher(ctx, testbed.LauncherSpec{Node: "b", Namespace: "default", Name: name, VMIUID: vmiUID, PodUID: dstPod, Stack: g.Stack})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Stop() })
	// Each node's ferryd finds its launcher's socket from the glob alone.
	for _, l := range []*testbed.Launcher{src, dst} {
		waitFor(t, "ferryd on node "+l.Node+" connected to launcher "+l.PodUID, 30*time.Second, func() bool {
			var doms struct {
				Libvirt []struct {
					Socket string `json:"socket"`
					Up     bool   `json:"up"`
				} `json:"libvirt"`
			}
			ctlJSON(t, l.Node, &doms, "domains")
			for _, s := range doms.Libvirt {
				if s.Socket == l.Socket && s.Up {
					return true
				}
			}
			return false
		})
	}
	return src, dst, vmiUID
}

func wantLauncherState(t *testing.T, l *testbed.Launcher, state libvirt.DomainState, reason int32) {
	t.Helper()
	s, r, err := l.State()
	if err != nil || s != int32(state) || r != reason {
		t.Errorf("%s in launcher %s on node %s: libvirt says state %d/%d (%v), want %d/%d", l.Domain, l.PodUID, l.Node, s, r, err, state, reason)
	}
}

func checkLauncherJob(t *testing.T, j api.Job, l *testbed.Launcher, vmiUID string) {
	t.Helper()
	role := api.RoleSource
	if l.Node == "b" {
		role = api.RoleTarget
	}
	if j.Socket != l.Socket || j.Role != role || j.Node != l.Node {
		t.Errorf("node %s: job on socket %q, role %s, node %s; want the launcher's %s, %s", l.Node, j.Socket, j.Role, j.Node, l.Socket, role)
	}
	if j.VMI == nil || j.VMI.UID != vmiUID || j.VMI.Namespace != "default" || j.VMI.Name != strings.TrimPrefix(l.Domain, "default_") {
		t.Errorf("node %s: job's VMI %+v, want UID %s", l.Node, j.VMI, vmiUID)
	}
}

// launcherCompleted reads the launcher's completed-job statistics, keeping
// them for other readers, with the truth checks' own decoding.
func launcherCompleted(t *testing.T, l *testbed.Launcher) *completedStats {
	t.Helper()
	c, err := l.Libvirt()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	dom, err := c.DomainLookupByName(l.Domain)
	if err != nil {
		t.Fatal(err)
	}
	typ, params, err := c.DomainGetJobStats(dom, libvirt.DomainJobStatsCompleted|libvirt.DomainJobStatsKeepCompleted)
	if err != nil {
		t.Fatalf("completed-job statistics of %s in launcher %s: %v", l.Domain, l.PodUID, err)
	}
	if typ == int32(libvirt.DomainJobNone) {
		t.Fatalf("%s in launcher %s: libvirt kept no completed-job statistics", l.Domain, l.PodUID)
	}
	return decodeStats(typ, params)
}

// KubeVirt's launchers bring their own libvirt and QEMU, not the host's
// (KubeVirt 1.9's is libvirt 11.10): pods running trixie-backports' 12.9
// and QEMU 11.1 under the host's ferryd are tracked as any, and ferryd
// says which libvirt and QEMU each pod runs.
func testLaunchersOfAnotherStack(t *testing.T) {
	supported(t, "launcher-other-stack", "yes: pods of the newest stack's libvirt under the host's ferryd")
	src, dst, uid := launcherPair(t, "lnew", testbed.LauncherSpec{MemoryMiB: 256, DirtyMiB: 128, DirtyRateMiBs: 8, Stack: testbed.StackNewest})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := bed.MigrateLauncher(ctx, testbed.LauncherMigration{From: src, To: dst, BandwidthMiBs: 32}); err != nil {
		t.Fatal(err)
	}
	wantLauncherState(t, src, libvirt.DomainShutoff, int32(libvirt.DomainShutoffMigrated))
	wantLauncherState(t, dst, libvirt.DomainRunning, int32(libvirt.DomainRunningMigrated))
	for _, l := range []*testbed.Launcher{src, dst} {
		j := waitJob(t, l.Node, l.Domain, "Completed with its VMI", 30*time.Second, func(j api.Job) bool {
			return j.Phase == api.PhaseCompleted && j.VMI != nil
		})
		checkLauncherJob(t, j, l, uid)
		var doms api.DomainsResponse
		ctlJSON(t, l.Node, &doms, "domains")
		var seen *api.SocketStatus
		for i, s := range doms.Libvirt {
			if s.Socket == l.Socket {
				seen = &doms.Libvirt[i]
			}
		}
		lib, qemu := podVersions(t, l)
		if !strings.HasPrefix(lib, "12.9.") || !strings.HasPrefix(qemu, "11.1.") {
			t.Fatalf("the pod runs libvirt %s and QEMU %s, not the newest stack's", lib, qemu)
		}
		if seen == nil || seen.LibvirtVersion != lib || seen.QEMUVersion != qemu {
			t.Errorf("ferryd on %s shows the pod's libvirt as %+v; the pod's libvirt says %s with QEMU %s", l.Node, seen, lib, qemu)
		}
	}
	done := launcherCompleted(t, dst)
	if done.DataTotal == 0 {
		t.Error("the target pod's libvirt kept no completed-job statistics")
	}
}

// podVersions is what the launcher's own libvirt says it and its QEMU are.
func podVersions(t *testing.T, l *testbed.Launcher) (lib, qemu string) {
	t.Helper()
	c, err := l.Libvirt()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	lv, err := c.ConnectGetLibVersion()
	if err != nil {
		t.Fatal(err)
	}
	qv, err := c.ConnectGetVersion()
	if err != nil {
		t.Fatal(err)
	}
	return libvirtx.VersionString(lv), libvirtx.VersionString(qv)
}
