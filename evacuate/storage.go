package evacuate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/preflight"
)

// judgeStorage settles a local disk the migration would have to copy, by
// its filesystem: on shared storage it only asks the target to mount it;
// on this node's own it blocks, for Ferry copies no storage; where that
// cannot be told, it is left to the dry run.
func judgeStorage(ctx context.Context, b *api.Blocker, root string) {
	// A block device's filesystem is the device directory's, whatever
	// storage is behind it.
	if root == "" || b.Path == "" || strings.HasPrefix(b.Path, "/dev/") {
		return
	}
	wait := storageWait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	if wait < 100*time.Millisecond {
		b.Message += " (its storage could not be told in time)"
		return
	}
	shared, kind, err := storageWithin(root, b.Path, wait)
	switch {
	case err != nil:
		b.Message += " (its storage could not be told: " + err.Error() + ")"
	case shared:
		b.Severity = api.SeverityWarns
		b.Message = fmt.Sprintf("disk %s is on shared storage (%s): the target must mount it at the same path", b.Device, kind)
	default:
		b.Severity = api.SeverityBlocks
		b.Message = fmt.Sprintf("disk %s (%s) is on this node's own filesystem (%s), and a live migration here copies no storage", b.Device, b.Path, kind)
	}
}

// storageLooks are the looks at a disk's filesystem under way.
var storageLooks sync.Map

// storageWait bounds the look at a disk's filesystem: beneath a pod's
// root, a FUSE or hung NFS mount could hold the lookup forever.
const storageWait = 2 * time.Second

// storageWithin is preflight.Storage given up after wait; a lookup that
// hangs keeps its thread until the kernel answers.
// One look per file at a time: a look that hangs keeps its thread, and
// asking again would only add one more each time.
func storageWithin(root, path string, wait time.Duration) (bool, string, error) {
	type answer struct {
		shared bool
		kind   string
		err    error
	}
	key := root + "\x00" + path
	if _, busy := storageLooks.LoadOrStore(key, true); busy {
		return false, "", errors.New("its filesystem has not answered an earlier look yet")
	}
	done := make(chan answer, 1)
	go func() {
		defer storageLooks.Delete(key)
		shared, kind, err := preflight.Storage(root, path)
		done <- answer{shared, kind, err}
	}()
	select {
	case a := <-done:
		return a.shared, a.kind, a.err
	case <-time.After(wait):
		return false, "", fmt.Errorf("its filesystem did not answer within %v", wait)
	}
}
