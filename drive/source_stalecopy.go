package drive

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
)

// Once a migration has switched to post-copy, the target's copy is the
// guest: it runs there on its own memory and the shared disks. The
// source's copy must never run again, yet QEMU itself starts it again
// when the migration fails in its completion (the stream lost after the
// last page left and before the target's last word came back: QEMU calls
// that failed, not a paused post-copy, and starts the vCPUs it stopped at
// the switch). staleCopyGuard pauses such a copy the moment libvirt
// reports it running, and again each time, for as long as the migration
// is driven here.
type staleCopyGuard struct {
	log  *zap.Logger
	conn *libvirtx.Conn
	dom  libvirt.Domain
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu       sync.Mutex
	switched bool // libvirt has shown the migration in post-copy here
	paused   int  // times the guard paused a copy that ran again
}

// staleCopyPoll is how often the guard looks without an event: libvirt's
// lifecycle events wake it at once; the poll covers a lost subscription.
const staleCopyPoll = 500 * time.Millisecond

// guardStaleCopy starts a guard over dom on conn; end stops it.
func guardStaleCopy(log *zap.Logger, conn *libvirtx.Conn, dom libvirt.Domain) *staleCopyGuard {
	g := &staleCopyGuard{log: log, conn: conn, dom: dom, stop: make(chan struct{}), done: make(chan struct{})}
	go g.run()
	return g
}

func (g *staleCopyGuard) run() {
	defer close(g.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-g.stop
		cancel()
	}()
	events, err := g.conn.Lifecycle(ctx, g.dom, 16)
	if err != nil {
		g.log.Warn("no lifecycle events for the post-copy guard; it polls only", zap.Error(err))
	}
	tick := time.NewTicker(staleCopyPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
			}
			if ok && ev.Event == int32(libvirt.DomainEventSuspended) && ev.Detail == int32(libvirt.DomainEventSuspendedPostcopy) {
				// Seen even if QEMU starts the copy again before the
				// state is read.
				g.mu.Lock()
				g.switched = true
				g.mu.Unlock()
			}
		case <-tick.C:
		}
		g.look(ctx)
	}
}

// look reads the copy's state, and pauses it if it runs after the switch.
func (g *staleCopyGuard) look(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	state, reason, err := g.conn.DomainState(cctx, g.dom)
	if err != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if state == libvirtx.StatePaused && (reason == libvirtx.PausedPostCopy || reason == libvirtx.PausedPostCopyFailed) {
		g.switched = true
	}
	// A source's copy libvirt calls running in post-copy is one QEMU
	// started again after the switch, whatever the guard saw before.
	if state != libvirtx.StateRunning || !(g.switched || libvirtx.InPostCopy(state, reason)) {
		return
	}
	if pauseStaleCopy(cctx, g.log, g.conn, g.dom, reason) {
		g.paused++
	}
}

// pauseStaleCopy pauses this node's copy, found running (for reason)
// after the switch to post-copy; true once paused.
func pauseStaleCopy(ctx context.Context, log *zap.Logger, conn *libvirtx.Conn, dom libvirt.Domain, reason int32) bool {
	if err := conn.Suspend(ctx, dom); err != nil {
		log.Error("this node's copy of the guest runs again after the switch to post-copy, and could not be paused: two copies run", zap.Int32("reason", reason), zap.Error(err))
		return false
	}
	log.Error("this node's copy of the guest ran again after the switch to post-copy (QEMU starts it when the migration fails in its completion): paused at once; the target's copy is the guest",
		zap.Int32("reason", reason))
	return true
}

// pausedAny says whether the guard has paused a copy that ran again.
func (g *staleCopyGuard) pausedAny() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused > 0
}

// end stops the guard and waits for it: before a deliberate resume, or
// once the migration is no longer driven here.
func (g *staleCopyGuard) end() {
	if g == nil {
		return
	}
	g.once.Do(func() { close(g.stop) })
	<-g.done
}

// errStaleCopy: the migration failed in QEMU here after the switch, which
// no recovery can resume.
var errStaleCopy = errors.New("post-copy failed in QEMU on this node after the switch (the stream was lost in the migration's completion), and QEMU cannot resume a failed migration: this node's copy ran again and was paused; the guest is the target's copy, without any page that had not reached it")

// settleStaleCopy ends what is left here of a migration whose copy here
// ran again after the switch, by the target's word: the target runs the
// guest (the copy here goes, as Confirm would take it), its copy never
// ran (this one is the guest: it runs again), or post-copy failed there
// (this one stays paused). settled is false when that could not be done.
func (d *driving) settleStaleCopy(outcome string) (settled bool) {
	ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
	defer cancel()
	var err error
	what := "this node's copy stays paused"
	switch outcome {
	case peer.OutcomeRunning:
		d.guard.end()
		what = "this node's paused copy was destroyed, as Confirm would have"
		st, _, serr := d.conn.DomainState(ctx, d.dom)
		switch {
		case libvirtx.IsNoDomain(serr), serr == nil && st == libvirtx.StateShutoff:
			what = "libvirt's Confirm stopped this node's copy"
		default:
			err = d.conn.Destroy(ctx, d.dom)
		}
	case peer.OutcomeStopped:
		d.guard.end()
		what = "the target's copy never ran: this node's runs again"
		err = continueCopy(ctx, d.conn, d.dom)
	case peer.OutcomeSplit:
	default:
		// No word from the target: the record keeps the pause's cause,
		// and the copy is settled from it once the target answers.
		d.markStalePaused()
		d.log.Warn("this node's copy, which ran again after the switch and was paused, waits for the target's word")
		return false
	}
	if err != nil {
		d.log.Error("could not settle this node's copy, which ran again after the switch and was paused; its record keeps why, for settling later", zap.String("outcome", outcome), zap.Error(err))
		d.markStalePaused()
		return false
	}
	d.log.Warn("settled this node's copy, which ran again after the switch and was paused", zap.String("outcome", outcome), zap.String("here", what))
	return true
}

// continueCopy runs this node's copy again once the target's has been
// found never to have run. The guard's pause, taken during libvirt's
// outgoing job, shows as paused post-copy; libvirt's resume waits for a
// job that job shuts out, and its Confirm then keeps the copy paused as a
// failed post-copy; so its vCPUs are started through QEMU's monitor,
// after which libvirt's cancelled Confirm finds it running and ends its
// job.
func continueCopy(ctx context.Context, c *libvirtx.Conn, dom libvirt.Domain) error {
	if st, _, err := c.DomainState(ctx, dom); err == nil && st == libvirtx.StateRunning {
		return nil
	}
	if err := c.ContinueCPUs(ctx, dom); err != nil {
		return err
	}
	for {
		st, _, err := c.DomainState(ctx, dom)
		if err == nil && st == libvirtx.StateRunning {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("libvirt does not show the copy running after QEMU's cont: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// markStalePaused records that the guard paused this node's copy, for the
// record's settling (applyOutcome) to end or run it.
func (d *driving) markStalePaused() {
	d.rec.StalePaused = true
	if err := d.s.recordDrive(d.rec); err != nil {
		d.log.Error("could not record that this node's copy was paused after the switch", zap.Error(err))
	}
}
