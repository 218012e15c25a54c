package libvirtx

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
)

// cpuGroupDirs makes a CPU cgroup named name and returns its path as
// /proc shows it and the directories to move a process into (one per v1
// controller, one for v2).
func cpuGroupDirs(t *testing.T, name string) (path string, dirs []string) {
	t.Helper()
	path = "/ferry-test-" + name
	if cgroups.Mode() == cgroups.Unified {
		dirs = []string{filepath.Join("/sys/fs/cgroup", path)}
	} else {
		dirs = []string{filepath.Join("/sys/fs/cgroup/cpu", path), filepath.Join("/sys/fs/cgroup/cpuacct", path)}
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("making cgroup %s (the test needs root and a writable cgroup tree): %v", d, err)
		}
		t.Cleanup(func() {
			// Its processes may outlive the test's other cleanups: they go
			// back to the root group first, so the group can go.
			if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
				for _, pid := range strings.Fields(string(b)) {
					os.WriteFile(filepath.Join(filepath.Dir(d), "cgroup.procs"), []byte(pid), 0o644)
				}
			}
			for range 50 {
				if os.Remove(d) == nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Errorf("cgroup %s left behind", d)
		})
	}
	return path, dirs
}

func moveTo(t *testing.T, pid int, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The groups found are kept per socket and domain, follow the QEMU into
// the cgroup libvirt moves it to, and are forgotten once it exits.
func TestQEMUCgroupsFollowLibvirtsQEMU(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("moves processes between cgroups: run as root (make test does)")
	}
	const dom = "ns1_vm1"
	q := &QEMUCgroups{}
	var sockets []string
	var pids []int
	for i, name := range []string{"first", "second"} {
		socket, state := libvirtRuntime(t, os.Getuid())
		pidfile := filepath.Join(state, dom+".pid")
		writePIDFile(t, pidfile, 0)
		pid := holdLocked(t, pidfile)
		writePIDFile(t, pidfile, pid)
		path, dirs := cpuGroupDirs(t, fmt.Sprintf("%s-%d", name, os.Getpid()))
		moveTo(t, pid, dirs)
		r, err := q.ReadCPU(socket, dom)
		if err != nil || r.PID != pid || r.Cgroup != path {
			t.Fatalf("socket %d: read pid %d in %q (%v); want pid %d in %s", i, r.PID, r.Cgroup, err, pid, path)
		}
		sockets, pids = append(sockets, socket), append(pids, pid)
	}
	// libvirt moves QEMU after the pid file is locked: the group moves too.
	moved, dirs := cpuGroupDirs(t, fmt.Sprintf("moved-%d", os.Getpid()))
	moveTo(t, pids[0], dirs)
	if r, err := q.ReadCPU(sockets[0], dom); err != nil || r.Cgroup != moved {
		t.Fatalf("after the move: %q (%v), want %s", r.Cgroup, err, moved)
	}
	// An exited QEMU's group is dropped at the next sweep.
	syscall.Kill(pids[1], syscall.SIGKILL)
	var ws syscall.WaitStatus
	syscall.Wait4(pids[1], &ws, 0, nil) // reaped, as init reaps a daemonized QEMU
	q.mu.Lock()
	delete(q.groups, groupKey{sockets[0], dom})
	q.swept = time.Time{} // the next lookup sweeps, as one every sweepEvery does
	q.mu.Unlock()
	if _, err := q.ReadCPU(sockets[0], dom); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.groups[groupKey{sockets[1], dom}]; ok || len(q.groups) != 1 {
		t.Fatalf("groups kept: %v; want only the live QEMU's", q.groups)
	}
}

// A socket listing more domains than its share keeps only its share, the
// ones read last; other sockets keep theirs.
func TestQEMUCgroupsKeepEachSocketToItsShare(t *testing.T) {
	q := &QEMUCgroups{groups: map[groupKey]*cpuGroup{}}
	t0 := time.Now()
	q.groups[groupKey{"other", "vm"}] = &cpuGroup{used: t0}
	for i := range maxGroupsPerSocket + 10 {
		q.makeRoom("pod")
		q.groups[groupKey{"pod", fmt.Sprint(i)}] = &cpuGroup{used: t0.Add(time.Duration(i+1) * time.Millisecond)}
	}
	n := 0
	for k := range q.groups {
		if k.socket == "pod" {
			n++
		}
	}
	_, first := q.groups[groupKey{"pod", "0"}]
	_, last := q.groups[groupKey{"pod", fmt.Sprint(maxGroupsPerSocket + 9)}]
	_, other := q.groups[groupKey{"other", "vm"}]
	if n != maxGroupsPerSocket || first || !last || !other {
		t.Fatalf("pod keeps %d groups (first %v, last %v), other socket kept %v; want %d, the newest, and the other's", n, first, last, other, maxGroupsPerSocket)
	}
}
