//go:build testbed_live

package testbed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"
)

// TestLiveLaunchers checks the launcher-faithful node against what KubeVirt
// really runs: the socket where and as the kubelet and virt-launcher make
// it, the daemon and QEMU as 107 in session mode, and a migration between
// two launchers through KubeVirt's socket names, read from both libvirts.
func TestLiveLaunchers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b := liveBed(ctx, t)
	vmi := uuid.NewString()
	src, err := b.StartLauncher(ctx, LauncherSpec{Node: "a", Namespace: "default", Name: "lvm", VMIUID: vmi, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop()
	dst, err := b.StartLauncher(ctx, LauncherSpec{Node: "b", Namespace: "default", Name: "lvm", VMIUID: vmi})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Stop()

	want := "/var/lib/kubelet/pods/" + src.PodUID + "/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock"
	if src.Socket != want || len(src.Socket) != 121 {
		t.Errorf("launcher socket %q (%d bytes), want %q (121)", src.Socket, len(src.Socket), want)
	}
	// Seen from inside node a, where ferryd looks.
	nodePath := fmt.Sprintf("/proc/%d/root%s", b.nodeState("a").Holder.PID, src.Socket)
	fi, err := os.Lstat(nodePath)
	if err != nil {
		t.Fatalf("the launcher socket is not where the node sees it: %v", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o700 || st.Uid != 107 || st.Gid != 107 {
		t.Errorf("launcher socket: %v owned %d:%d, want a socket 0700 owned 107:107", fi.Mode(), st.Uid, st.Gid)
	}
	if owner := procUID(t, src.PID()); owner != 107 {
		t.Errorf("the launcher's %s runs as uid %d, want 107", src.Daemon, owner)
	}
	pidfile := filepath.Join(src.volume("libvirt-runtime"), "qemu", "run", src.Domain+".pid")
	qemu, ok := pidFileProc(pidfile, "qemu-system", "guest="+src.Domain)
	if !ok {
		t.Fatalf("no QEMU for %s from %s", src.Domain, pidfile)
	}
	if owner := procUID(t, qemu.PID); owner != 107 {
		t.Errorf("QEMU runs as uid %d, want 107", owner)
	}

	if err := b.MigrateLauncher(ctx, LauncherMigration{From: src, To: dst}); err != nil {
		t.Fatal(err)
	}
	if s, r, err := src.State(); err != nil || s != int32(libvirt.DomainShutoff) || r != int32(libvirt.DomainShutoffMigrated) {
		t.Errorf("source after the migration: state %d/%d %v, want shut off/migrated", s, r, err)
	}
	if s, r, err := dst.State(); err != nil || s != int32(libvirt.DomainRunning) || r != int32(libvirt.DomainRunningMigrated) {
		t.Errorf("target after the migration: state %d/%d %v, want running/migrated", s, r, err)
	}
	// The guest goes on on the target: its dirtier keeps reporting.
	before := consoleLines(dst.ConsolePath())
	time.Sleep(2 * time.Second)
	if after := consoleLines(dst.ConsolePath()); after <= before {
		t.Errorf("the guest's console on the target did not move in 2s (%d lines)", after)
	}
}

func procUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			var uid int
			fmt.Sscan(f[1], &uid)
			return uid
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return -1
}

func consoleLines(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}
