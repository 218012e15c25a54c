package drive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
)

// A broken post-copy is resumed by libvirt's own protocol wherever this
// node's libvirt does not crash on it, as `virsh migrate
// --postcopy-resume` runs it: the source's Begin, Prepare here, the
// source's Perform, Finish here, the source's Confirm, each with
// VIR_MIGRATE_POSTCOPY_RESUME. Ferry's proxy carries the resumed stream as
// it carried the first. Nothing of Ferry's enters the guest's QEMU, which
// libvirt then neither taints nor keeps pass-through for in its live XML.

// resumeUnclaimed bounds how long a resume prepared here waits for the
// source's Finish: its Perform is bounded well within it.
const resumeUnclaimed = 2 * time.Minute

// resumeFlags are the target's flags on libvirt's resume route: libvirt
// refuses it without POSTCOPY, and its Prepare without LIVE.
const resumeFlags = libvirt.MigrateLive | libvirt.MigratePostcopy | libvirt.MigratePostcopyResume

// ResumesPostCopy says whether this node's libvirt resumes a broken
// post-copy by its own protocol: every libvirt but those whose daemon
// crashes on it (see libvirtx.ResumesPostCopy).
func (in *Target) ResumesPostCopy(ctx context.Context) bool {
	c, err := in.conn()
	if err != nil {
		return false
	}
	v, err := c.Ping(ctx)
	return err == nil && libvirtx.ResumesPostCopy(v)
}

// recoverByLibvirt runs libvirt's Prepare of the resume: the target QEMU
// listens at socket for the source's Perform, on a connection of its own
// kept until the resume's Finish (its close puts libvirt's job back to
// failed, which a next attempt takes up). The domain XML libvirt wants is
// the guest's name and UUID alone, which is all it uses: no peer's XML is
// parsed here, and the guest's own is not asked of libvirt, whose incoming
// job holds it.
func (in *Target) recoverByLibvirt(ctx context.Context, m peer.IncomingMigration, dom libvirt.Domain, socket string, r peer.Resume) (string, []byte, error) {
	if !r.ByLibvirt {
		return "", nil, peer.ErrResumeByLibvirt
	}
	// An earlier attempt's resume, prepared and never finished (its
	// Perform failed, its cancel lost on the link), holds libvirt's job
	// until its connection closes: libvirt refuses another Prepare until
	// then.
	in.mu.Lock()
	prev := in.resumes[m.ID]
	delete(in.resumes, m.ID)
	in.mu.Unlock()
	if prev != nil {
		prev.Close()
	}
	c, err := in.conn()
	if err != nil {
		return "", nil, err
	}
	v, err := c.Ping(ctx)
	if err != nil {
		return "", nil, PeerError(err)
	}
	if !libvirtx.ResumesPostCopy(v) {
		// Upgraded into one of those since the Prepare gave no monitor.
		return "", nil, fmt.Errorf("the guest's QEMU has no monitor of Ferry's, and libvirt %s here crashes on its own post-copy resume: it resumes once libvirt is past 11.3", libvirtx.VersionString(v))
	}
	done, err := awaitFailedHere(ctx, c, dom)
	if err != nil || done {
		return peer.QEMUCompleted, nil, err
	}
	name, err := libvirtx.ResumeDomainXML(dom, in.guestVirtType(m.Domain))
	if err != nil {
		return "", nil, err
	}
	own, err := c.Another(ctx)
	if err != nil {
		return "", nil, PeerError(err)
	}
	params := []libvirt.TypedParam{
		{Field: libvirt.MigrateParamDestXML, Value: *libvirt.NewTypedParamValueString(name)},
		{Field: libvirt.MigrateParamDestName, Value: *libvirt.NewTypedParamValueString(m.Domain)},
		{Field: libvirt.MigrateParamURI, Value: *libvirt.NewTypedParamValueString("unix://" + socket)},
	}
	cookie, err := own.Prepare(ctx, params, r.Cookie, resumeFlags, until(ctx))
	if err != nil {
		own.Close()
		return "", nil, PeerError(err)
	}
	in.mu.Lock()
	if in.resumes == nil {
		in.resumes = map[string]*libvirtx.Conn{}
	}
	prev = in.resumes[m.ID]
	in.resumes[m.ID] = own
	in.mu.Unlock()
	if prev != nil {
		// Two attempts at once: the latest holds libvirt's job.
		prev.Close()
	}
	// A source that never finishes it (restarted, its link gone) leaves
	// it to libvirt: the connection's close puts the job back to failed,
	// where libvirt completes a stream that ran to its end by itself.
	time.AfterFunc(resumeUnclaimed, func() {
		in.mu.Lock()
		unclaimed := in.resumes[m.ID] == own
		if unclaimed {
			delete(in.resumes, m.ID)
		}
		in.mu.Unlock()
		if unclaimed {
			own.Close()
		}
	})
	in.log.Info("libvirt's target QEMU listens for the resumed post-copy", zap.String("domain", m.Domain), zap.String("migration", m.ID))
	return libvirtx.QEMUMigrationPostCopyPaused, cookie, nil
}

// awaitFailedHere waits a while for libvirt to hold the guest's post-copy
// failed here: a QEMU that had not seen the break sees it once the
// source's pause reaches it through the proxies, the link's user timeout
// cuts them, or the proxy has cut a previous attempt's streams. libvirt
// shows that state only where a Finish waited or a connection closed, so
// past the wait its Prepare decides. done: libvirt completed it meanwhile.
func awaitFailedHere(ctx context.Context, c *libvirtx.Conn, dom libvirt.Domain) (done bool, err error) {
	deadline := time.Now().Add(pauseWait)
	for {
		state, reason, err := c.DomainState(ctx, dom)
		switch {
		case err != nil:
			return false, PeerError(err)
		case state == libvirtx.StateRunning && reason == libvirtx.RunningPostCopyFailed:
			return false, nil
		case !libvirtx.InPostCopy(state, reason):
			return state == libvirtx.StateRunning, nil
		case time.Now().After(deadline):
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Resumed runs libvirt's Finish of a resume this node prepared, which
// lasts until the migration completes here (or breaks again, libvirt then
// holding it failed for the next attempt). A cancelled one (the source's
// Perform failed) puts libvirt's job back to failed at once.
func (in *Target) Resumed(ctx context.Context, m peer.IncomingMigration, cookie []byte, cancelled bool) ([]byte, error) {
	in.mu.Lock()
	own := in.resumes[m.ID]
	delete(in.resumes, m.ID)
	in.mu.Unlock()
	if own == nil {
		return nil, errors.New("no resume of this post-copy is prepared here (ferryd restarted since, or a newer attempt took its place)")
	}
	defer own.Close()
	params := []libvirt.TypedParam{{Field: libvirt.MigrateParamDestName, Value: *libvirt.NewTypedParamValueString(m.Domain)}}
	ck, err := own.Finish(ctx, params, cookie, resumeFlags, cancelled, untilOr(ctx, unbounded))
	if err != nil {
		return nil, PeerError(err)
	}
	return ck, nil
}

// guestVirtType is the virt type the guest's QEMU runs under here, off its
// command line; where that cannot be read, what the host offers.
func (in *Target) guestVirtType(domain string) string {
	pid, err := libvirtx.QEMUPID(in.socket, domain)
	if err == nil {
		if vt, err := libvirtx.QEMUVirtType(pid); err == nil {
			return vt
		}
	}
	if _, err := os.Stat("/dev/kvm"); err == nil {
		return "kvm"
	}
	return "qemu"
}
