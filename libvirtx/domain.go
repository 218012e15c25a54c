package libvirtx

import (
	"context"
	"errors"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// Domain is one domain's identity and state as libvirt reports it.
type Domain struct {
	Ref    libvirt.Domain `json:"-"`
	Name   string         `json:"name"`
	UUID   string         `json:"uuid"`
	State  State          `json:"-"`
	Reason int32          `json:"-"`
}

// UUIDString formats a libvirt UUID the usual 8-4-4-4-12 way.
func UUIDString(u libvirt.UUID) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Persistent reports whether the domain has a definition that outlives it.
func (c *Conn) Persistent(ctx context.Context, dom libvirt.Domain) (bool, error) {
	return call(ctx, c, "domain is persistent", func(l *libvirt.Libvirt) (bool, error) {
		p, err := l.DomainIsPersistent(dom)
		return p == 1, err
	})
}

// MaxLauncherDomains bounds the domains a socket the glob matched may list.
// A KubeVirt launcher pod's libvirt runs its VMI's one domain; the glob
// reaches into every pod's volumes, and any pod could serve a libvirt of
// its own there listing thousands of made-up migrations, each of which
// would cost ferryd a job's memory and /metrics its series.
const MaxLauncherDomains = 4

// MaxLauncherName bounds a launcher's domain name in bytes: KubeVirt names
// a domain NAMESPACE_NAME (at most 63+1+253). A longer one would cost every
// series and event that carries it.
const MaxLauncherName = 512

// ErrNotALauncher: a socket the glob matched lists what no KubeVirt
// launcher runs (too many domains, or a name too long); nothing of it is
// tracked, and the pool holds it off.
var ErrNotALauncher = errors.New("lists what no KubeVirt launcher runs: not tracked")

// Matched says whether the connection is to a socket the glob matched: a
// pod's, held to what a launcher runs.
func (c *Conn) Matched() bool { return c.dialer.socketOnly() }

// LauncherName says whether a launcher's libvirt may name a domain so.
func LauncherName(name string) bool { return len(name) <= MaxLauncherName }

// Domains lists the active domains with their states in one round trip
// (the "state" group of virConnectGetAllDomainStats needs no domain job, so
// it does not wait on a migrating domain's state-change lock).
func (c *Conn) Domains(ctx context.Context) ([]Domain, error) {
	return call(ctx, c, "list domains", func(l *libvirt.Libvirt) ([]Domain, error) {
		recs, err := l.ConnectGetAllDomainStats(nil, uint32(libvirt.DomainStatsState),
			uint32(libvirt.ConnectGetAllDomainsStatsActive))
		if err != nil {
			return nil, err
		}
		if c.Matched() {
			if len(recs) > MaxLauncherDomains {
				return nil, fmt.Errorf("%w: %d domains on %s", ErrNotALauncher, len(recs), c.socket)
			}
			for _, r := range recs {
				if !LauncherName(r.Dom.Name) {
					return nil, fmt.Errorf("%w: a domain name of %d bytes on %s", ErrNotALauncher, len(r.Dom.Name), c.socket)
				}
			}
		}
		out := make([]Domain, 0, len(recs))
		for _, r := range recs {
			d := Domain{Ref: r.Dom, Name: r.Dom.Name, UUID: UUIDString(r.Dom.UUID)}
			for _, p := range r.Params {
				v, _ := paramUint(p.Value.I)
				switch p.Field {
				case "state.state":
					d.State = State(v)
				case "state.reason":
					d.Reason = int32(v)
				}
			}
			out = append(out, d)
		}
		return out, nil
	})
}

type stateReason struct {
	state  State
	reason int32
}

// DomainState returns the state and reason of one domain.
func (c *Conn) DomainState(ctx context.Context, dom libvirt.Domain) (State, int32, error) {
	sr, err := call(ctx, c, "domain state", func(l *libvirt.Libvirt) (stateReason, error) {
		st, rs, err := l.DomainGetState(dom, 0)
		return stateReason{State(st), rs}, err
	})
	return sr.state, sr.reason, err
}

// Resume runs a paused domain again.
func (c *Conn) Resume(ctx context.Context, dom libvirt.Domain) error {
	return do(ctx, c, "resume domain", func(l *libvirt.Libvirt) error { return l.DomainResume(dom) })
}

// Suspend pauses a running domain's vCPUs; its QEMU and memory stay.
func (c *Conn) Suspend(ctx context.Context, dom libvirt.Domain) error {
	return do(ctx, c, "suspend domain", func(l *libvirt.Libvirt) error { return l.DomainSuspend(dom) })
}

// Destroy stops a domain at once, as pulling its plug would.
func (c *Conn) Destroy(ctx context.Context, dom libvirt.Domain) error {
	return do(ctx, c, "destroy domain", func(l *libvirt.Libvirt) error { return l.DomainDestroy(dom) })
}

// Undefine removes a domain's definition, keeping its disks, NVRAM and
// TPM state, as libvirt's own migration does with UNDEFINE_SOURCE.
func (c *Conn) Undefine(ctx context.Context, dom libvirt.Domain) error {
	return do(ctx, c, "undefine domain", func(l *libvirt.Libvirt) error {
		return l.DomainUndefineFlags(dom, libvirt.DomainUndefineKeepNvram|libvirt.DomainUndefineKeepTpm)
	})
}

// Define makes xml a persistent domain definition.
func (c *Conn) Define(ctx context.Context, xml string) error {
	return do(ctx, c, "define domain", func(l *libvirt.Libvirt) error {
		_, err := l.DomainDefineXML(xml)
		return err
	})
}

// LookupDomain finds an active or defined domain by name.
func (c *Conn) LookupDomain(ctx context.Context, name string) (libvirt.Domain, error) {
	return call(ctx, c, "lookup domain", func(l *libvirt.Libvirt) (libvirt.Domain, error) {
		return l.DomainLookupByName(name)
	})
}

// DomainXML returns the live domain XML.
func (c *Conn) DomainXML(ctx context.Context, dom libvirt.Domain) (string, error) {
	return call(ctx, c, "domain xml", func(l *libvirt.Libvirt) (string, error) {
		return l.DomainGetXMLDesc(dom, 0)
	})
}

// ConfigXML is the domain's persistent definition as a migration sends
// it: the inactive config (pending --config changes, not live-only
// hotplugs), with what libvirt writes only for a migration's peer.
func (c *Conn) ConfigXML(ctx context.Context, dom libvirt.Domain) (string, error) {
	return call(ctx, c, "domain config xml", func(l *libvirt.Libvirt) (string, error) {
		return l.DomainGetXMLDesc(dom, libvirt.DomainXMLInactive|libvirt.DomainXMLSecure|libvirt.DomainXMLMigratable)
	})
}

// Autostart says whether libvirtd starts the domain when it starts on a
// booted host.
func (c *Conn) Autostart(ctx context.Context, dom libvirt.Domain) (bool, error) {
	return call(ctx, c, "domain autostart", func(l *libvirt.Libvirt) (bool, error) {
		on, err := l.DomainGetAutostart(dom)
		return on == 1, err
	})
}

// SetAutostart turns the domain's autostart on or off.
func (c *Conn) SetAutostart(ctx context.Context, dom libvirt.Domain, on bool) error {
	return do(ctx, c, "set domain autostart", func(l *libvirt.Libvirt) error {
		v := int32(0)
		if on {
			v = 1
		}
		return l.DomainSetAutostart(dom, v)
	})
}

// AbortJob cancels the domain's job. In post-copy a plain abort is refused by
// libvirt; postCopy=true asks for the post-copy pause instead, which leaves
// both sides paused in post-copy-failed (the only "abort" post-copy has).
func (c *Conn) AbortJob(ctx context.Context, dom libvirt.Domain, postCopy bool) error {
	return do(ctx, c, "abort job", func(l *libvirt.Libvirt) error {
		if postCopy {
			return l.DomainAbortJobFlags(dom, uint32(libvirt.DomainAbortJobPostcopy))
		}
		return l.DomainAbortJob(dom)
	})
}

// StartPostCopy switches a running pre-copy migration to post-copy.
func (c *Conn) StartPostCopy(ctx context.Context, dom libvirt.Domain) error {
	return do(ctx, c, "start post-copy", func(l *libvirt.Libvirt) error {
		return l.DomainMigrateStartPostCopy(dom, 0)
	})
}

// MaxDowntime returns the downtime a migration may take for its final
// stop-and-copy: pre-copy switches over once what is left fits in it.
func (c *Conn) MaxDowntime(ctx context.Context, dom libvirt.Domain) (time.Duration, error) {
	ms, err := call(ctx, c, "max downtime", func(l *libvirt.Libvirt) (uint64, error) {
		return l.DomainMigrateGetMaxDowntime(dom, 0)
	})
	return time.Duration(ms) * time.Millisecond, err
}

// SetMaxDowntime sets the downtime the migration's final stop-and-copy may
// take; QEMU switches over at its next sync if what is left fits in it.
func (c *Conn) SetMaxDowntime(ctx context.Context, dom libvirt.Domain, d time.Duration) error {
	return do(ctx, c, "set max downtime", func(l *libvirt.Libvirt) error {
		return l.DomainMigrateSetMaxDowntime(dom, uint64(d/time.Millisecond), 0)
	})
}
