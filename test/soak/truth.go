package main

import (
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/test/testbed"
)

// Where a guest runs is read from each node's libvirtd, never from Ferry:
// Ferry's records are what is checked against it.

// libvirt's numeric states and reasons, as go-libvirt returns them.
const (
	stRunning = int32(libvirt.DomainRunning)
	stPaused  = int32(libvirt.DomainPaused)
	stShutoff = int32(libvirt.DomainShutoff)

	rsRunningPostCopy       = int32(libvirt.DomainRunningPostcopy)
	rsRunningPostCopyFailed = int32(libvirt.DomainRunningPostcopyFailed)

	jobCompleted = int32(libvirt.DomainJobCompleted)
)

// copyOn is one node's libvirt view of a guest.
type copyOn struct {
	Node          string
	Present       bool
	State, Reason int32
	// Stats are libvirt's completed-job statistics, nil when it keeps none.
	Stats *jobStats
}

// jobStats are the figures of libvirt's last completed job that Ferry's
// target record of a pre-copy migration must equal.
type jobStats struct {
	Type                             int32
	DowntimeMs, DataTotal, Processed uint64
}

// whole: libvirt runs the guest here on its own, all its memory here. On
// a target running/post-copy is a migration still pulling pages; on a
// source it is the source resumed after a failed post-copy.
func (c copyOn) whole() bool {
	return c.Present && c.State == stRunning && c.Reason != rsRunningPostCopy && c.Reason != rsRunningPostCopyFailed
}

// live: a copy that runs, or could run again (paused).
func (c copyOn) live() bool {
	return c.Present && (c.State == stRunning || c.State == stPaused)
}

func (c copyOn) String() string {
	if !c.Present {
		return "absent"
	}
	names := map[[2]int32]string{
		{stRunning, 1}: "running/booted", {stRunning, 2}: "running/migrated", {stRunning, 5}: "running/unpaused",
		{stRunning, 6}:                 "running/migration-cancelled",
		{stRunning, rsRunningPostCopy}: "running/post-copy", {stRunning, rsRunningPostCopyFailed}: "running/post-copy-failed",
		{stPaused, 1}: "paused/user", {stPaused, 2}: "paused/migration", {stPaused, 7}: "paused/post-copy",
		{stPaused, 13}: "paused/post-copy-failed", {stPaused, 14}: "paused/api-error",
		{stShutoff, 3}: "shutoff/migrated", {stShutoff, 5}: "shutoff/failed",
	}
	s := names[[2]int32{c.State, c.Reason}]
	if s == "" {
		s = "state"
	}
	return fmt.Sprintf("%s (%d/%d)", s, c.State, c.Reason)
}

// callTimeout bounds each libvirt call: go-libvirt has no deadline of its
// own, and a libvirtd being restarted, or a target holding a failed
// post-copy's lock, would hang the soak.
const callTimeout = 10 * time.Second

func bounded(what, node string, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(callTimeout):
		return fmt.Errorf("libvirtd on %s: %s did not answer within %v", node, what, callTimeout)
	}
}

// readCopy reads the guest's state on a node, and libvirt's completed-job
// statistics with KEEP_COMPLETED: a plain read would delete them, and
// Ferry reads them too.
func readCopy(bed *testbed.Bed, node, guest string) (copyOn, error) {
	c := copyOn{Node: node}
	l, err := bed.Libvirt(node)
	if err != nil {
		return c, err
	}
	defer func() { go l.Disconnect() }()
	var dom libvirt.Domain
	err = bounded("lookup", node, func() (err error) { dom, err = l.DomainLookupByName(guest); return err })
	if libvirt.IsNotFound(err) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("looking %s up on %s: %w", guest, node, err)
	}
	err = bounded("state", node, func() (err error) { c.State, c.Reason, err = l.DomainGetState(dom, 0); return err })
	if libvirt.IsNotFound(err) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("state of %s on %s: %w", guest, node, err)
	}
	c.Present = true
	if c.State != stRunning || c.Reason == rsRunningPostCopyFailed {
		return c, nil
	}
	_ = bounded("completed job stats", node, func() error {
		typ, params, err := l.DomainGetJobStats(dom, libvirt.DomainJobStatsCompleted|libvirt.DomainJobStatsKeepCompleted)
		if err != nil || typ == int32(libvirt.DomainJobNone) {
			return err
		}
		c.Stats = &jobStats{Type: typ}
		for _, p := range params {
			switch p.Field {
			case "downtime":
				c.Stats.DowntimeMs = asUint(p.Value.I)
			case "data_total":
				c.Stats.DataTotal = asUint(p.Value.I)
			case "data_processed":
				c.Stats.Processed = asUint(p.Value.I)
			}
		}
		return nil
	})
	return c, nil
}

func asUint(v any) uint64 {
	switch x := v.(type) {
	case int32:
		return uint64(x)
	case uint32:
		return uint64(x)
	case int64:
		return uint64(x)
	case uint64:
		return x
	}
	return 0
}

// placement is a guest's copies on both nodes.
type placement struct {
	A, B copyOn
}

func readPlacement(bed *testbed.Bed, guest string) (placement, error) {
	a, errA := readCopy(bed, "a", guest)
	b, errB := readCopy(bed, "b", guest)
	if errA != nil {
		return placement{a, b}, errA
	}
	return placement{a, b}, errB
}

func (p placement) on(node string) copyOn {
	if node == "a" {
		return p.A
	}
	return p.B
}

// home is the one node that runs the guest whole while the other holds no
// live copy; "" when that is not so.
func (p placement) home() string {
	switch {
	case p.A.whole() && !p.B.live():
		return "a"
	case p.B.whole() && !p.A.live():
		return "b"
	}
	return ""
}

// wrong says what is wrong with a placement at rest, "" if nothing.
func (p placement) wrong() string {
	switch {
	case p.home() != "":
		return ""
	case p.A.live() && p.B.live():
		return fmt.Sprintf("a live copy on both nodes (a: %s, b: %s)", p.A, p.B)
	case !p.A.live() && !p.B.live():
		return fmt.Sprintf("no live copy on either node (a: %s, b: %s)", p.A, p.B)
	}
	return fmt.Sprintf("no node runs it whole (a: %s, b: %s)", p.A, p.B)
}

func (p placement) String() string { return fmt.Sprintf("a: %s, b: %s", p.A, p.B) }
