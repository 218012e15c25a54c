package drive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// DryRun asks the target whether it would take the domain, through the
// migration's own steps, with the flags the node's policy would start it
// with: libvirt's Begin here (without change protection, so its job ends
// there), the target's CPU check and libvirt's Prepare there, whose guest
// the target stops before it answers. No memory is sent. The error is
// for a request that could not be tried; what the nodes refused is in
// the answer.
func (s *Source) DryRun(ctx context.Context, req MigrateRequest) (api.DryRun, error) {
	// The migration it stands for, as the node's policy would start it.
	req, _, err := s.effective(req)
	if err != nil {
		return api.DryRun{}, err
	}
	socket, dom, err := s.tracker.DomainRef(req.Socket, req.Domain)
	if err != nil {
		return api.DryRun{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	conn, err := s.cfg.Conns.Conn(socket)
	if err != nil {
		return api.DryRun{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if err := directFromPod(conn, req); err != nil {
		return api.DryRun{}, err
	}
	drive := driveKey(conn.Socket(), req.Domain)
	if s.tracker.InFlight(conn.Socket(), req.Domain) {
		return api.DryRun{}, fmt.Errorf("%w: %s is migrating", ErrConflict, req.Domain)
	}
	if !s.running.start(drive) {
		return api.DryRun{}, fmt.Errorf("%w: Ferry is driving a migration of %s", ErrConflict, req.Domain)
	}
	defer s.running.end(drive)
	defer s.trials.Hold(conn.Socket(), req.Domain)()
	// Begin starts libvirt's migration job, tied to the connection that
	// ran it, which Confirm must end: one of the dry run's own.
	own, err := conn.Another(ctx)
	if err != nil {
		return api.DryRun{}, fmt.Errorf("opening a libvirt connection for the dry run: %w", err)
	}
	defer own.Close()

	start := time.Now()
	res := api.DryRun{Target: req.Target, TargetNode: req.TargetNode, DataPath: cmp.Or(req.DataPath, DataPathProxy)}
	done := func(step string, err error) (api.DryRun, error) {
		res.OK, res.Step, res.DurationMs = err == nil, step, time.Since(start).Milliseconds()
		if err != nil {
			res.Error = err.Error()
		}
		return res, nil
	}
	flags, params := migrateFlags(req)
	if persistent, err := own.Persistent(ctx, dom); err == nil && persistent {
		flags |= libvirt.MigratePersistDest
	}
	// Without change protection libvirt's Begin ends its job before it
	// returns: the guest is not held from other work while the target
	// prepares, and there is nothing to confirm.
	flags &^= libvirt.MigrateChangeProtection
	domXML, cookie, err := own.Begin(ctx, dom, params, flags)
	if err != nil {
		return done(api.DryRunBegin, libvirtWords(err))
	}
	if domXML, err = libvirtx.WithoutRecoveryMonitor(domXML); err != nil {
		return done(api.DryRunBegin, fmt.Errorf("reading libvirt's Begin XML: %w", err))
	}
	want := ""
	if req.TargetNode != "" {
		want = proxy.NodeOwner(req.TargetNode)
	}
	var resp peer.ControlResponse
	for {
		resp, err = s.proxy.ControlTo(ctx, req.Target, want, peer.ControlRequest{Op: peer.OpPrepare, Migration: newMigrationID(), Domain: req.Domain,
			XML: domXML, Cookie: cookie, Flags: uint32(flags), Parallel: req.Parallel, PostCopy: flags&libvirt.MigratePostcopy != 0, DryRun: true,
			Direct: req.DataPath == DataPathDirect})
		var busy *peer.ControlError
		if !errors.As(err, &busy) || busy.Reason != peer.ReasonInboundBusy {
			break
		}
		// The target runs as many dry runs as it takes at once: this one
		// waits its turn, as a migration does.
		select {
		case <-ctx.Done():
		case <-time.After(inboundRetry):
			continue
		}
		break
	}
	res.CPU = knownCPU(resp.CPU)
	var ce *peer.ControlError
	switch {
	case errors.As(err, &ce) && ce.Reason == peer.ReasonCPUIncompatible:
		return done(api.DryRunCPU, err)
	case err != nil:
		var wp *proxy.WrongPeerError
		if errors.As(err, &wp) {
			err = fmt.Errorf("target proxy %s is %s, not node %s", wp.Addr, wp.Got, req.TargetNode)
		}
		return done(api.DryRunPrepare, err)
	}
	s.log.Info("dry run: the target would take the migration", zap.String("domain", req.Domain), zap.String("target", req.Target),
		zap.String("targetNode", resp.PeerNode), zap.String("cpu", resp.CPU))
	if res.TargetNode == "" {
		res.TargetNode = resp.PeerNode
	}
	return done("", nil)
}

// libvirtWords is libvirt's own message, without the call's wrapping.
func libvirtWords(err error) error {
	var le libvirt.Error
	if errors.As(err, &le) {
		return errors.New(le.Message)
	}
	return err
}

// knownCPU is a target's CPU answer if it is one a target gives: a peer's
// text goes no further.
func knownCPU(s string) string {
	switch s {
	case "", string(libvirtx.CPUIdentical), string(libvirtx.CPUSuperset), "default", "not compared", CPUHostOnly:
		return s
	}
	return "unknown"
}
