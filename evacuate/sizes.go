package evacuate

import (
	"context"
	"fmt"
	"sync"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/preflight"
)

// Bounds on the disk sizes a check asks of one domain's libvirt, which on
// a KubeVirt node is a pod's: it may list any number of disks and leave
// each size call unanswered for the whole call timeout, and every call it
// leaves unanswered holds a goroutine until its socket closes. One after
// the other, 30 such disks outlasted a whole plan.
const (
	// SizesAtOnce is how many sizes are asked together; once one of them
	// goes unanswered, no more are asked of the domain. libvirtd serves 5
	// calls of a client at a time (max_client_requests): sizes stuck on a
	// hung mount leave room for the tracker's and the pool's.
	SizesAtOnce = 2
	// maxSizedDisks is how many disks' sizes are asked of a domain at most.
	maxSizedDisks = 32
)

// askSizes fills in the sizes of the local disks among blockers, a few at
// a time. It returns the disk whose size libvirt left unanswered in time,
// or "" when it answered all it was asked.
func askSizes(ctx context.Context, dom LiveDomain, blockers []api.Blocker) string {
	disks := localDiskIndexes(blockers)
	if len(disks) > maxSizedDisks {
		noteUnsized(blockers, disks[maxSizedDisks:], fmt.Sprintf("not asked: ferryd asks the sizes of %d disks of a domain at most", maxSizedDisks))
		disks = disks[:maxSizedDisks]
	}
	for len(disks) > 0 {
		n := min(SizesAtOnce, len(disks))
		if late := askBatch(ctx, dom, blockers, disks[:n]); len(late) > 0 {
			noteUnsized(blockers, late, "unknown: libvirt did not answer in time")
			noteUnsized(blockers, disks[n:], "not asked: libvirt left another disk's size unanswered")
			return blockers[late[0]].Device
		}
		disks = disks[n:]
	}
	return ""
}

func localDiskIndexes(blockers []api.Blocker) []int {
	var out []int
	for i, b := range blockers {
		if b.Code == preflight.CodeLocalDisk {
			out = append(out, i)
		}
	}
	return out
}

// askBatch asks the sizes of the disks at blockers' indexes together, and
// returns the indexes libvirt left unanswered (LiveDomain.DiskSize's
// errors). An error libvirt answers leaves a disk without its size, as
// ever: some disks have none.
func askBatch(ctx context.Context, dom LiveDomain, blockers []api.Blocker, disks []int) []int {
	late := make([]bool, len(disks))
	var wg sync.WaitGroup
	for k, i := range disks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			size, known, err := dom.DiskSize(ctx, blockers[i].Device)
			switch {
			case err != nil:
				late[k] = true
			case known:
				blockers[i].SizeBytes = size
			}
		}()
	}
	wg.Wait()
	var out []int
	for k, i := range disks {
		if late[k] {
			out = append(out, i)
		}
	}
	return out
}

func noteUnsized(blockers []api.Blocker, disks []int, why string) {
	for _, i := range disks {
		blockers[i].Message += " (its size is " + why + ")"
	}
}
