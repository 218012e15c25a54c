package proxy

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/peer"
)

// shutdownRefusal carries the node's own words ("ferryd on NODE is
// shutting down: ...") while still matching ErrShuttingDown.
type shutdownRefusal string

func (e shutdownRefusal) Error() string      { return string(e) }
func (shutdownRefusal) Is(target error) bool { return target == peer.ErrShuttingDown }

// drainPoll is how often Shutdown looks whether the migrations in flight
// have ended: relays end rarely and the wait is bounded, so polling keeps
// shutdown bookkeeping out of the relay paths.
const drainPoll = 50 * time.Millisecond

// inFlight is one migration with streams open, as the shutdown reports it.
type inFlight struct {
	id, domain, side string
	streams          [4]int // open relays by Kind
	counters         *Counters
}

// streamList names the open streams with their connection counts.
func (f inFlight) streamList() []string {
	var out []string
	for _, k := range peer.DataKinds {
		if n := f.streams[k]; n > 0 {
			out = append(out, fmt.Sprintf("%s=%d", k, n))
		}
	}
	return out
}

// Shutdown stops the proxy without killing the migrations going through
// it: new migrations are refused at once (prepares on this node, outgoing
// migrations, and streams of prepared migrations that had not started),
// while those in flight keep relaying, new streams included,
// until they end or ctx is done. Whatever is still in flight then is cut
// and logged, and the returned error names it. Serve returns afterwards.
//
// A migration cut in post-copy fails for good (the guest's memory is split
// across the two hosts), which is why the caller's grace should let one
// finish. Prepared migrations that never started are dropped in libvirt
// too, so no target QEMU is left waiting.
func (p *Proxy) Shutdown(ctx context.Context) error {
	return p.stop(ctx)
}

func (p *Proxy) stop(ctx context.Context) error {
	p.stopOnce.Do(func() {
		p.stopErr = p.drain(ctx)
		p.mu.Lock()
		ln := p.ln
		p.mu.Unlock()
		if ln != nil {
			ln.Close()
		}
		close(p.stopped)
	})
	<-p.stopped
	return p.stopErr
}

func (p *Proxy) drain(ctx context.Context) error {
	why := fmt.Sprintf("ferryd on %s is shutting down", p.cfg.Node)
	p.mu.Lock()
	p.closing = why
	p.mu.Unlock()
	p.reg.close(why)

	start := time.Now()
	flights := p.inFlight()
	if len(flights) > 0 && ctx.Err() == nil {
		grace := "until they end"
		if deadline, ok := ctx.Deadline(); ok {
			grace = "for up to " + time.Until(deadline).Round(time.Millisecond).String()
		}
		p.log.Info("shutting down: new migrations are refused; waiting for those in flight "+grace,
			zap.Strings("migrations", ids(flights)))
		tick := time.NewTicker(drainPoll)
		for len(flights) > 0 && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
			flights = p.inFlight()
		}
		tick.Stop()
		if len(flights) == 0 {
			p.log.Info("every migration in flight ended during the shutdown grace", zap.Duration("took", time.Since(start)))
		}
	}
	for _, f := range flights {
		p.log.Warn("shutting down: cutting a migration still in flight (one in post-copy is left with its guest's memory split across two hosts)",
			zap.String("migration", f.id), zap.String("domain", f.domain), zap.String("side", f.side),
			zap.Strings("streams", f.streamList()), zap.Any("bytes", f.counters.Snapshot()),
			zap.Duration("waited", time.Since(start)))
	}
	p.cut(why)
	if len(flights) > 0 {
		return fmt.Errorf("%s: cut %d migration(s) still in flight: %v", why, len(flights), ids(flights))
	}
	return nil
}

// inFlight lists the migrations with streams open on either side, and
// the direct ones whose Perform runs here.
func (p *Proxy) inFlight() []inFlight {
	p.mu.Lock()
	srcs := make([]*SourceMigration, 0, len(p.sources))
	for _, s := range p.sources {
		srcs = append(srcs, s)
	}
	p.mu.Unlock()
	var out []inFlight
	for _, s := range srcs {
		s.mu.Lock()
		f := inFlight{id: s.ID, side: "source", streams: s.open, counters: s.Counters}
		direct := s.performing
		s.mu.Unlock()
		if f.streams == [4]int{} && !direct {
			continue
		}
		if p.cfg.SourceDomain != nil {
			f.domain = p.cfg.SourceDomain(s.ID)
		}
		out = append(out, f)
	}
	out = append(out, p.reg.inFlight()...)
	sort.Slice(out, func(i, j int) bool { return out[i].side+out[i].id < out[j].side+out[j].id })
	return out
}

func ids(fs []inFlight) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.id
	}
	return out
}

// cut ends every source socket and incoming migration, and their relays.
func (p *Proxy) cut(why string) {
	p.mu.Lock()
	srcs := make([]*SourceMigration, 0, len(p.sources))
	for _, s := range p.sources {
		srcs = append(srcs, s)
	}
	p.mu.Unlock()
	// At once: a direct migration's cut waits on libvirt's abort.
	var wg sync.WaitGroup
	for _, s := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Close(why)
		}()
	}
	wg.Wait()
	// A prepared migration nobody will relay any more would leave its
	// target QEMU waiting; one finishing is libvirt's to end.
	p.dropAllPrepared(why)
	for _, m := range p.reg.active() {
		p.Unregister(m.ID, why)
	}
}

func (p *Proxy) closingReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closing
}

// refuseSource counts and logs an outgoing migration refused because the
// proxy is shutting down.
func (p *Proxy) refuseSource(id, why string) error {
	msg := fmt.Sprintf("%s: migration %s is not started", why, id)
	p.refuse(peer.ReasonShuttingDown, msg, "local")
	return shutdownRefusal(msg)
}

// refuse counts and logs a refusal whose peer is not a connection.
func (p *Proxy) refuse(reason, detail, who string) {
	p.metrics.reject(reason)
	p.log.Warn("proxy refused a migration", zap.String("reason", reason), zap.String("detail", detail), zap.String("peer", who))
}
