package testbed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/cgroups/v3"
)

// podCgroups are the CPU cgroup directories a launcher pod's processes run
// in, as the kubelet gives each pod its own (kubepods/pod<UID>): without
// them a launcher's QEMU would sit in the root cgroup, whose figures are
// the whole host's, which no real pod does. cgroup v1 has one per CPU
// controller, v2 one.
func podCgroups(podUID string) ([]string, error) {
	var dirs []string
	for _, p := range podsParents() {
		dirs = append(dirs, filepath.Join(p, "pod"+podUID))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("testbed: pod cgroup %s: %w", d, err)
		}
	}
	return dirs, nil
}

// podsParents hold the bed's pod cgroups.
func podsParents() []string {
	const kubepods = "ferry-testbed-kubepods"
	if cgroups.Mode() == cgroups.Unified {
		return []string{filepath.Join("/sys/fs/cgroup", kubepods)}
	}
	return []string{filepath.Join("/sys/fs/cgroup/cpu", kubepods), filepath.Join("/sys/fs/cgroup/cpuacct", kubepods)}
}

// removeLeftoverPodCgroups removes the pod cgroups of launchers a crashed
// run left, once their processes are stopped.
func removeLeftoverPodCgroups() error {
	var dirs []string
	for _, p := range podsParents() {
		pods, _ := filepath.Glob(filepath.Join(p, "pod*"))
		dirs = append(append(dirs, pods...), p)
	}
	return removePodCgroups(dirs)
}

// removePodCgroups removes a stopped pod's cgroups; a group empties a
// moment after its last process is reaped.
func removePodCgroups(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		var err error
		for i := 0; i < 50; i++ {
			if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
