package libvirtxtest

import (
	"fmt"

	libvirt "github.com/digitalocean/go-libvirt"
)

// Procedures of libvirt's remote program (remote_protocol.x) the fake
// answers, and the events it sends. go-libvirt keeps its numbers internal.
const (
	ProcConnectOpen                             = 1
	ProcConnectClose                            = 2
	ProcConnectGetVersion                       = 4
	ProcConnectSupportsFeature                  = 60
	ProcDomainGetXMLDesc                        = 14
	ProcDomainGetMaxMemory                      = 17
	ProcDomainLookupByName                      = 23
	ProcAuthList                                = 66
	ProcDomainIsActive                          = 150
	ProcConnectGetLibVersion                    = 157
	ProcDomainAbortJob                          = 164
	ProcDomainMigrateSetMaxDowntime             = 166
	ProcDomainGetState                          = 212
	ProcDomainGetJobStats                       = 298
	ProcDomainMigratePrepare3Params             = 303
	ProcDomainMigratePerform3Params             = 305
	ProcDomainMigrateFinish3Params              = 306
	ProcConnectDomainEventCallbackRegisterAny   = 316
	ProcConnectDomainEventCallbackDeregisterAny = 317
	ProcDomainEventCallbackLifecycle            = 318
	ProcConnectGetAllDomainStats                = 344
	ProcDomainEventCallbackMigrationIteration   = 359
	ProcDomainMigrateStartPostCopy              = 364
	ProcDomainMigrateGetMaxDowntime             = 387
	ProcDomainAbortJobFlags                     = 442
)

// LibVersion and QEMUVersion are the versions the fake reports: libvirt
// 11.3.0 and QEMU 10.0.2.
const (
	LibVersion  = 11003000
	QEMUVersion = 10000002
)

// reply answers a call from the fake's state.
func (s *Server) reply(c *conn, prog, proc uint32, args []byte) ([]byte, *libvirt.Error) {
	if prog != remoteProgram {
		return nil, s.unknown(prog, proc)
	}
	switch proc {
	case ProcConnectOpen, ProcConnectClose:
		return nil, nil
	case ProcAuthList:
		return Words(1, 0), nil // one auth type: none
	case ProcConnectSupportsFeature:
		return s.supportsFeature(c, args), nil
	case ProcConnectGetLibVersion:
		return new(XDR).U64(LibVersion).Bytes(), nil
	case ProcConnectGetVersion:
		return new(XDR).U64(QEMUVersion).Bytes(), nil
	case ProcConnectDomainEventCallbackRegisterAny:
		return s.subscribe(c, args), nil
	case ProcConnectDomainEventCallbackDeregisterAny:
		s.unsubscribe(c, args)
		return nil, nil
	case ProcConnectGetAllDomainStats:
		return s.allDomainStats(Flags(args)), nil
	case ProcDomainLookupByName:
		return s.onDomain(args, func(d *domain) ([]byte, *libvirt.Error) {
			return new(XDR).Domain(d.Name, d.UUID, d.ID).Bytes(), nil
		})
	case ProcDomainGetState:
		return s.onDomain(args, func(d *domain) ([]byte, *libvirt.Error) {
			return new(XDR).I32(d.State).I32(d.Reason).Bytes(), nil
		})
	case ProcDomainIsActive:
		return s.onDomain(args, func(d *domain) ([]byte, *libvirt.Error) {
			if d.active() {
				return Words(1), nil
			}
			return Words(0), nil
		})
	case ProcDomainGetJobStats:
		return s.onDomain(args, func(d *domain) ([]byte, *libvirt.Error) { return d.jobStats(Flags(args)) })
	case ProcDomainAbortJob:
		return s.onDomain(args, func(d *domain) ([]byte, *libvirt.Error) { return nil, d.abort(0) })
	case ProcDomainAbortJobFlags:
		return s.onDomain(args, func(d *domain) ([]byte, *libvirt.Error) { return nil, d.abort(Flags(args)) })
	case ProcDomainMigrateGetMaxDowntime:
		return s.onDomain(args, func(d *domain) ([]byte, *libvirt.Error) {
			return new(XDR).U64(d.maxDowntimeMs).Bytes(), nil
		})
	case ProcDomainMigrateSetMaxDowntime:
		return s.onDomain(args, func(d *domain) ([]byte, *libvirt.Error) {
			r := argReader{args}
			r.string()
			r.skip(16 + 4) // the domain's UUID and ID
			d.maxDowntimeMs = uint64(r.u32())<<32 | uint64(r.u32())
			return nil, nil
		})
	case ProcDomainMigrateStartPostCopy:
		return s.onDomain(args, func(d *domain) ([]byte, *libvirt.Error) {
			if !d.job.active() || d.job.operation() != int32(libvirt.DomainJobOperationStrMigrationOut) {
				return nil, invalid("post-copy can only be started while outgoing migration is in progress")
			}
			return nil, nil
		})
	case ProcDomainGetMaxMemory:
		return new(XDR).U64(1 << 20).Bytes(), nil // KiB: a 1 GiB guest
	case ProcDomainMigratePerform3Params:
		return Words(0), nil // an empty cookie
	}
	return nil, s.unknown(prog, proc)
}

// unknown is the answer to a procedure the fake does not serve: an error
// that names it, so that a test missing one says which.
func (s *Server) unknown(prog, proc uint32) *libvirt.Error {
	// libvirtd's own words, which go-libvirt reads as ErrUnsupported.
	msg := fmt.Sprintf("unknown procedure: %d", proc)
	s.logf("libvirtxtest answers no procedure %d of program %#x (remote_protocol.x numbers them)", proc, prog)
	return &libvirt.Error{Code: uint32(libvirt.ErrNoSupport), Message: msg}
}

// onDomain runs f on the domain the call's arguments name, under the
// fake's lock; a domain that is gone fails the call as libvirt does.
func (s *Server) onDomain(args []byte, f func(*domain) ([]byte, *libvirt.Error)) ([]byte, *libvirt.Error) {
	name := domainName(args)
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.domains[name]
	if d == nil {
		return nil, noDomain(name)
	}
	return f(d)
}

// allDomainStats answers virConnectGetAllDomainStats with the "state"
// group, the one libvirtx asks for.
func (s *Server) allDomainStats(flags uint32) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	doms := s.listed(flags&uint32(libvirt.ConnectGetAllDomainsStatsActive) != 0)
	x := new(XDR).U32(uint32(len(doms)))
	for _, d := range doms {
		x.Domain(d.Name, d.UUID, d.ID).U32(2)
		x.Param(libvirt.DomainStatsStateState, d.State).Param(libvirt.DomainStatsStateReason, d.Reason)
	}
	return x.Bytes()
}

// jobStats answers virDomainGetJobStats: the completed job's statistics
// with VIR_DOMAIN_JOB_STATS_COMPLETED, deleted once read unless
// KEEP_COMPLETED is asked for too; else the current job's, which an
// inactive domain has none of.
func (d *domain) jobStats(flags uint32) ([]byte, *libvirt.Error) {
	j := d.job
	if flags&uint32(libvirt.DomainJobStatsCompleted) != 0 {
		j = d.completed
		if flags&uint32(libvirt.DomainJobStatsKeepCompleted) == 0 {
			d.completed = nil
		}
	} else if !d.active() {
		return nil, invalid("domain is not running")
	} else if j != nil && j.operation() == int32(libvirt.DomainJobOperationStrMigrationIn) {
		// libvirt keeps an incoming migration's statistics on its source.
		return nil, &libvirt.Error{Code: uint32(libvirt.ErrOperationUnsupported),
			Message: "Operation not supported: migration statistics are available only on the source host"}
	}
	if j == nil {
		j = &job{typ: int32(libvirt.DomainJobNone)}
	}
	if j.err != nil {
		return nil, j.err
	}
	x := new(XDR)
	j.encode(x)
	return x.Bytes(), nil
}

// abort cancels the current job, which libvirt then keeps as the completed
// one. In post-copy libvirt can only pause the migration, and only when
// asked to with VIR_DOMAIN_ABORT_JOB_POSTCOPY: the source pauses with its
// job still there. It refuses either way asked of the other.
func (d *domain) abort(flags uint32) *libvirt.Error {
	if !d.job.active() {
		return invalid("no job is active on the domain")
	}
	postCopy := d.State == int32(libvirt.DomainPaused) && d.Reason == int32(libvirt.DomainPausedPostcopy)
	pause := flags&uint32(libvirt.DomainAbortJobPostcopy) != 0
	switch {
	case postCopy && !pause:
		return invalid("cannot abort migration in post-copy mode")
	case pause && !postCopy:
		return invalid("current job is not outgoing migration in post-copy mode")
	}
	if pause {
		d.State, d.Reason = int32(libvirt.DomainPaused), int32(libvirt.DomainPausedPostcopyFailed)
		return nil
	}
	done := *d.job
	done.typ = int32(libvirt.DomainJobCancelled)
	d.job, d.completed = nil, &done
	return nil
}
