package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/proxy"
)

// MigrateRequest and MigrateResponse are the body and answer of
// POST /v1/migrations.
type (
	MigrateRequest  = migration.MigrateRequest
	MigrateResponse = migration.MigrateResponse
)

// Errors the API layer maps to status codes.
var (
	errBadRequest = errors.New("bad migration request")
	errConflict   = errors.New("conflict")
)

// drives tracks the migrations this ferryd is driving.
type drives struct {
	mu      sync.Mutex
	running map[string]chan struct{} // domain -> closed when the drive ends
}

func newDrives() *drives { return &drives{running: map[string]chan struct{}{}} }

func (ds *drives) start(domain string) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if _, busy := ds.running[domain]; busy {
		return false
	}
	ds.running[domain] = make(chan struct{})
	return true
}

func (ds *drives) end(domain string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if done, ok := ds.running[domain]; ok {
		close(done)
		delete(ds.running, domain)
	}
}

// stopAll gives running migrations a grace period to finish before ferryd
// stops relaying them: cutting the proxy would fail them.
func (ds *drives) stopAll() {
	ds.mu.Lock()
	waits := make([]chan struct{}, 0, len(ds.running))
	for _, d := range ds.running {
		waits = append(waits, d)
	}
	ds.mu.Unlock()
	deadline := time.After(30 * time.Second)
	for _, w := range waits {
		select {
		case <-w:
		case <-deadline:
			return
		}
	}
}

func validateMigrate(r MigrateRequest) error {
	var errs []string
	if r.Domain == "" {
		errs = append(errs, "domain is empty")
	}
	if _, port, err := net.SplitHostPort(r.Target); err != nil || port == "" {
		errs = append(errs, fmt.Sprintf("target %q is not the target node's proxy address HOST:PORT", r.Target))
	}
	if r.PostCopyAfterSeconds < 0 {
		errs = append(errs, "postCopyAfterSeconds is negative")
	}
	if r.BandwidthMiBs < 0 || r.PostCopyBandwidthMiBs < 0 {
		errs = append(errs, "bandwidth is negative")
	}
	if r.Parallel < 0 || r.Parallel > 64 {
		errs = append(errs, fmt.Sprintf("parallel %d is outside 0-64", r.Parallel))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", errBadRequest, strings.Join(errs, "; "))
	}
	return nil
}

func newMigrationID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "m-" + hex.EncodeToString(b)
}

// startMigration registers the migration on the target, opens the source
// sockets and starts libvirt's migration; it returns once libvirt has been
// asked, and the migration goes on in the background.
func (d *Daemon) startMigration(ctx context.Context, req MigrateRequest) (MigrateResponse, error) {
	if d.Proxy == nil {
		return MigrateResponse{}, fmt.Errorf("%w: this ferryd runs without a migration proxy (--proxy-listen is empty)", errConflict)
	}
	if err := validateMigrate(req); err != nil {
		return MigrateResponse{}, err
	}
	conn, dom, err := d.Tracker.ConnFor(req.Domain)
	if err != nil {
		return MigrateResponse{}, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	mem, err := conn.MemoryBytes(ctx, dom)
	if err != nil {
		return MigrateResponse{}, fmt.Errorf("reading the guest's memory size, which sets the migration's deadline: %w", err)
	}
	deadline := libvirtx.MigrationDeadline(mem, req.BandwidthMiBs)
	if d.Tracker.InFlight(req.Domain) {
		return MigrateResponse{}, fmt.Errorf("%w: %s is already migrating", errConflict, req.Domain)
	}
	if !d.drives.start(req.Domain) {
		return MigrateResponse{}, fmt.Errorf("%w: Ferry is already driving a migration of %s", errConflict, req.Domain)
	}
	id := newMigrationID()
	kinds := []proxy.Kind{proxy.KindLibvirt, proxy.KindMemory}
	streams := []string{"libvirt", "memory"}
	if _, err := d.Proxy.Control(ctx, req.Target, proxy.ControlRequest{Op: "register", Migration: id, Domain: req.Domain,
		Streams: streams, SocketDir: d.Proxy.SocketDir()}); err != nil {
		d.drives.end(req.Domain)
		return MigrateResponse{}, fmt.Errorf("registering the migration on the target: %w", err)
	}
	src, err := d.Proxy.OpenSource(id, req.Target, kinds)
	if err != nil {
		d.Proxy.Control(ctx, req.Target, proxy.ControlRequest{Op: "unregister", Migration: id, Reason: "source setup failed"})
		d.drives.end(req.Domain)
		return MigrateResponse{}, err
	}
	info := migration.ProxyInfo{MigrationID: id, Target: req.Target, TLS: d.Proxy.TLS(), Parallel: req.Parallel}
	d.Tracker.Drive(req.Domain, info)
	go func() {
		defer d.drives.end(req.Domain)
		d.drive(req, id, conn, dom, src, info, deadline)
	}()
	msg := "migration started through the Ferry proxy"
	if !d.Proxy.TLS() {
		msg += " (plain TCP: trusted migration network only)"
	}
	return MigrateResponse{MigrationID: id, Domain: req.Domain, Target: req.Target, TLS: d.Proxy.TLS(), Message: msg}, nil
}

// drive runs libvirt's migration to its end, then tears down both ends and
// leaves the whole account on the job.
func (d *Daemon) drive(req MigrateRequest, id string, conn *libvirtx.Conn, dom libvirt.Domain, src *proxy.SourceMigration, info migration.ProxyInfo, deadline time.Duration) {
	log := d.log.With(zap.String("domain", req.Domain), zap.String("migration", id), zap.String("target", req.Target))
	start := time.Now()
	flags := libvirt.MigrateLive | libvirt.MigratePeer2peer
	params := []libvirt.TypedParam{{Field: libvirt.MigrateParamURI, Value: *libvirt.NewTypedParamValueString("unix://" + src.Paths[proxy.KindMemory])}}
	if req.PostCopy || req.PostCopyAfterSeconds > 0 {
		flags |= libvirt.MigratePostcopy
	}
	if req.AutoConverge {
		flags |= libvirt.MigrateAutoConverge
	}
	if req.BandwidthMiBs > 0 {
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamBandwidth, Value: *libvirt.NewTypedParamValueUllong(uint64(req.BandwidthMiBs))})
	}
	if req.PostCopyBandwidthMiBs > 0 {
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamBandwidthPostcopy, Value: *libvirt.NewTypedParamValueUllong(uint64(req.PostCopyBandwidthMiBs))})
	}
	if req.Parallel > 0 {
		flags |= libvirt.MigrateParallel
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamParallelConnections, Value: *libvirt.NewTypedParamValueInt(int32(req.Parallel))})
	}
	dconnuri := "qemu+unix:///system?socket=" + src.Paths[proxy.KindLibvirt]
	log.Info("starting a Ferry-driven migration", zap.Bool("postCopy", flags&libvirt.MigratePostcopy != 0), zap.Int("parallel", req.Parallel), zap.Duration("deadline", deadline))

	finished := make(chan struct{})
	if req.PostCopyAfterSeconds > 0 {
		go func() {
			select {
			case <-finished:
			case <-time.After(time.Duration(req.PostCopyAfterSeconds * float64(time.Second))):
				if _, err := d.Tracker.StartPostCopy(req.Domain, func(c *libvirtx.Conn, ref libvirt.Domain) error {
					return c.StartPostCopy(context.Background(), ref)
				}); err != nil && !errors.Is(err, migration.ErrAlreadyPostCopy) {
					log.Warn("switch to post-copy failed", zap.Error(err))
				}
			}
		}()
	}
	// The migrate call blocks for the whole migration, while the tracker
	// keeps sampling on the same connection. Past its deadline (KubeVirt's
	// 150 s per GiB of guest memory, see MigrationDeadline) libvirt's job
	// is aborted, not just abandoned.
	err := conn.Migrate(context.Background(), dom, dconnuri, params, flags, deadline)
	close(finished)

	src.Close("migration ended")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, uerr := d.Proxy.Control(ctx, req.Target, proxy.ControlRequest{Op: "unregister", Migration: id, Reason: "migration ended"}); uerr != nil {
		log.Info("target did not take the unregister (it also ends the registration when its side of the job ends)", zap.Error(uerr))
	}
	info.Bytes = src.Counters.Snapshot()
	info.Errors = src.Errors()
	failure := ""
	if err != nil {
		failure = d.failureReason(req.Domain, err, info.Errors, start)
		log.Warn("Ferry-driven migration failed", zap.String("reason", failure))
	} else {
		log.Info("Ferry-driven migration completed", zap.Duration("took", time.Since(start)))
	}
	d.Tracker.DriveEnded(req.Domain, dom, conn.Socket(), start, info, failure)
}

// failureReason joins what libvirt said with what the proxy and the
// migration link saw, so the reason names the plane that broke.
func (d *Daemon) failureReason(domain string, err error, proxyErrs []string, since time.Time) string {
	var b strings.Builder
	b.WriteString("migration failed: ")
	b.WriteString(err.Error())
	if len(proxyErrs) > 0 {
		fmt.Fprintf(&b, "; proxy: %s", proxyErrs[0])
		if len(proxyErrs) > 1 {
			fmt.Fprintf(&b, " (+%d more)", len(proxyErrs)-1)
		}
	}
	if links := d.linkEvents(domain, since); len(links) > 0 {
		fmt.Fprintf(&b, "; migration link: %s", strings.Join(links, ", "))
	}
	return b.String()
}

// linkEvents are the migration interface's changes the job recorded since
// the drive began.
func (d *Daemon) linkEvents(domain string, since time.Time) []string {
	j, ok := d.Tracker.Job(domain)
	if !ok {
		return nil
	}
	var out []string
	for _, e := range j.Events {
		if (e.Kind == eventLinkDown || e.Kind == eventLinkUp) && !e.Time.Before(since) {
			out = append(out, e.Detail+" at "+e.Time.Format("15:04:05.000"))
		}
	}
	return out
}

// targetGrace is how long a target keeps relaying after its side of the
// job ended: libvirt's source still talks to the target over the RPC stream
// to confirm or clean up, and normally unregisters right after.
const targetGrace = 30 * time.Second

// jobFinished ends the target side's registration some time after its job
// ends, so a source that cannot reach the target any more (link down, source
// crashed) does not leave it registered.
func (d *Daemon) jobFinished(j migration.Job) {
	d.reportVMI(j)
	if d.Proxy == nil || j.Role != migration.RoleTarget {
		return
	}
	time.AfterFunc(targetGrace, func() {
		if ids := d.Proxy.UnregisterDomain(j.Domain, "target job ended "+string(j.Phase)); len(ids) > 0 {
			d.log.Info("target registrations ended after the job", zap.String("domain", j.Domain), zap.Strings("migrations", ids))
		}
	})
}

// Kinds of the job events that record the migration interface's link.
const (
	eventLinkDown = "linkDown"
	eventLinkUp   = "linkUp"
)

// linkChanged records the migration interface going down or up on every
// in-flight job: evidence for whatever happens next, and part of the
// failure reason of a migration Ferry drives.
func (d *Daemon) linkChanged(up bool) {
	state, kind := "down", eventLinkDown
	if up {
		state, kind = "up", eventLinkUp
	}
	d.Tracker.NoteEvent(kind, fmt.Sprintf("%s went %s", d.cfg.MigrationInterface, state))
	d.log.Warn("migration interface changed", zap.String("interface", d.cfg.MigrationInterface), zap.String("state", state))
}
