package libvirtx

import (
	"context"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// The steps of libvirt's migration protocol (version 3, with parameters)
// that Ferry runs itself, as `virsh migrate` does without --p2p: Begin,
// Perform and Confirm on the source's libvirt, Prepare and Finish on the
// target's, each node's ferryd talking only to its own libvirt. Cookies are
// libvirt's opaque bytes, carried from one step to the next unchanged.

// Begin returns the domain XML to send to the target and the cookie for its
// Prepare.
func (c *Conn) Begin(ctx context.Context, dom libvirt.Domain, params []libvirt.TypedParam, flags libvirt.DomainMigrateFlags) (string, []byte, error) {
	type r struct {
		xml    string
		cookie []byte
	}
	v, err := call(ctx, c, "migrate begin", func(l *libvirt.Libvirt) (r, error) {
		ck, xml, err := l.DomainMigrateBegin3Params(dom, params, uint32(flags))
		return r{xml, ck}, err
	})
	return v.xml, v.cookie, err
}

// Prepare readies the target for an incoming migration: libvirt starts the
// target QEMU listening at the migrate URI in params. It returns the cookie
// for the source's Perform. A cold QEMU capabilities cache makes this the
// slowest step (16 s on the test bed), hence its own timeout. A Prepare
// that libvirt completes after the caller gave up (a libvirtd frozen for a
// while) is undone: its target QEMU would otherwise wait, paused, until
// this connection closes, and every retry be refused as a domain that
// exists.
func (c *Conn) Prepare(ctx context.Context, params []libvirt.TypedParam, cookie []byte, flags libvirt.DomainMigrateFlags, timeout time.Duration) ([]byte, error) {
	p, err := c.PrepareURI(ctx, params, cookie, flags, timeout)
	return p.Cookie, err
}

// Prepared is what libvirt's Prepare answers: the cookie for the source's
// Perform, and where the target QEMU listens when libvirt chose it (a
// tcp:// URI given without a port).
type Prepared struct {
	Cookie []byte
	URI    string
}

// PrepareURI is Prepare with libvirt's URI out.
func (c *Conn) PrepareURI(ctx context.Context, params []libvirt.TypedParam, cookie []byte, flags libvirt.DomainMigrateFlags, timeout time.Duration) (Prepared, error) {
	return callWithin(ctx, c, "migrate prepare", timeout, func(l *libvirt.Libvirt) (Prepared, error) {
		ck, uri, err := l.DomainMigratePrepare3Params(params, cookie, uint32(flags))
		p := Prepared{Cookie: ck}
		if len(uri) > 0 {
			p.URI = uri[0]
		}
		return p, err
	}, func(_ Prepared, err error) {
		if err != nil {
			return
		}
		var name []libvirt.TypedParam
		for _, p := range params {
			if p.Field == libvirt.MigrateParamDestName {
				name = append(name, p)
			}
		}
		// However short the caller's wait was, the undo gets libvirt's
		// time: only its answer frees the target QEMU.
		c.Finish(context.Background(), name, nil, flags, true, max(timeout, lateUndoTimeout))
	})
}

// lateUndoTimeout bounds the Finish that undoes a late Prepare.
const lateUndoTimeout = time.Minute

// Finish ends the incoming side: with cancelled=false libvirt resumes the
// guest on the target (in post-copy it waits for the last pages first, so
// it can take as long as the migration); with cancelled=true it kills the
// target QEMU. It returns the cookie for the source's Confirm; an error
// means the guest does not run on the target.
func (c *Conn) Finish(ctx context.Context, params []libvirt.TypedParam, cookie []byte, flags libvirt.DomainMigrateFlags,
	cancelled bool, timeout time.Duration) ([]byte, error) {
	return callWithin(ctx, c, "migrate finish", timeout, func(l *libvirt.Libvirt) ([]byte, error) {
		_, ck, err := l.DomainMigrateFinish3Params(params, cookie, uint32(flags), boolInt(cancelled))
		return ck, err
	}, nil)
}

// Confirm ends the source side: with cancelled=false the source domain is
// stopped (the guest runs on the target), with cancelled=true it resumes
// on the source.
func (c *Conn) Confirm(ctx context.Context, dom libvirt.Domain, params []libvirt.TypedParam, cookie []byte,
	flags libvirt.DomainMigrateFlags, cancelled bool, timeout time.Duration) error {
	_, err := callWithin(ctx, c, "migrate confirm", timeout, func(l *libvirt.Libvirt) (struct{}, error) {
		return struct{}{}, l.DomainMigrateConfirm3Params(dom, params, cookie, uint32(flags), boolInt(cancelled))
	}, nil)
	return err
}

// ActiveDomain reports whether a domain of this name runs here.
func (c *Conn) ActiveDomain(ctx context.Context, name string) (bool, error) {
	dom, err := c.LookupDomain(ctx, name)
	if IsNoDomain(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	id, err := call(ctx, c, "domain is active", func(l *libvirt.Libvirt) (int32, error) {
		return l.DomainIsActive(dom)
	})
	return id == 1, err
}

func boolInt(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
