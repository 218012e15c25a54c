package drive

import (
	"context"
	"errors"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// The source's steps of libvirt's own resume protocol (see
// target_resume.go): Begin, then the target's Prepare through the
// recovery's ask; Perform over the fresh stream; the target's Finish
// (OpResumed), which lasts until the migration completes; Confirm.

// sourceResumeFlags are the source's flags on libvirt's resume route: as
// libvirt's own client, CHANGE_PROTECTION on every step, which its Begin
// and Perform of a resume require.
const sourceResumeFlags = libvirt.MigrateLive | libvirt.MigrateChangeProtection | libvirt.MigratePostcopy | libvirt.MigratePostcopyResume

// resumeAnswerWait bounds the wait, once QEMU here paused the resumed
// migration again, for the target's Finish to say so too; past it the
// source's Confirm puts libvirt's job here back to failed by itself.
const resumeAnswerWait = 10 * time.Second

// resumesByLibvirt says whether this source resumes a broken post-copy by
// libvirt's own protocol, should the target's libvirt too: unless told
// not to, and never on a libvirt of the versions whose resume crashed
// (NEWS names the target's daemon; the source's steps are not trusted
// there either).
func (s *Source) resumesByLibvirt(ctx context.Context, c *libvirtx.Conn, ask peer.ControlRequest) bool {
	if s.cfg.ResumeByMonitor || !ask.PostCopy || ask.RecoverSeconds <= 0 || ask.Direct {
		// Nothing to resume: not asked, so an older target is not made
		// to refuse a field it would not read.
		return false
	}
	v, err := c.Ping(ctx)
	return err == nil && libvirtx.ResumesPostCopy(v)
}

// resumeParams are the parameters libvirt applies again on a resume: the
// post-copy bandwidth cap of the migration this process drove (one picked
// up from its record after a restart has none, and resumes uncapped).
func (r *recovery) resumeParams() []libvirt.TypedParam {
	if r.req.PostCopyBandwidthMiBs <= 0 {
		return nil
	}
	return []libvirt.TypedParam{{Field: libvirt.MigrateParamBandwidthPostcopy, Value: *libvirt.NewTypedParamValueUllong(uint64(r.req.PostCopyBandwidthMiBs))}}
}

// ask asks the target for a fresh stream. A target whose libvirt resumes
// the post-copy itself says so, and is asked again with libvirt's Begin
// of the resume here, as every later attempt of this recovery is. The
// resume's steps here run on a connection of the attempt's own (r.lv),
// closed when the attempt ends: libvirt puts a resume left unfinished
// (an error between its steps, a Confirm refused) back to failed when the
// connection that began it closes.
func (r *recovery) ask(ctx context.Context) (peer.ControlResponse, error) {
	req := peer.ControlRequest{Op: peer.OpRecover, Migration: r.tid, Domain: r.req.Domain}
	if !r.byLibvirt {
		resp, err := r.s.proxy.ControlTo(ctx, r.req.Target, r.owner, req)
		var ce *peer.ControlError
		if !errors.As(err, &ce) || ce.Reason != peer.ReasonResumeByLibvirt {
			return resp, err
		}
		r.byLibvirt = true
		r.log.Info("the target's libvirt resumes the post-copy by its own protocol")
	}
	if v, err := r.libvirt().Ping(ctx); err == nil && !libvirtx.ResumesPostCopy(v) {
		// Upgraded into one of those since it said at the prepare that it
		// resumes by libvirt's protocol, which the target holds it to.
		return peer.ControlResponse{}, fmt.Errorf("this node's libvirt %s crashes on its own post-copy resume, which the target's QEMU, prepared without a monitor, needs", libvirtx.VersionString(v))
	}
	lv, err := r.libvirt().Another(ctx)
	if err != nil {
		return peer.ControlResponse{}, fmt.Errorf("a libvirt connection for the resume here: %w", err)
	}
	r.lv = lv
	_, cookie, err := lv.Begin(ctx, r.dom, r.resumeParams(), sourceResumeFlags)
	if err != nil {
		return peer.ControlResponse{}, fmt.Errorf("libvirt's Begin of the resume here: %w", err)
	}
	req.LibvirtResume, req.Cookie = true, cookie
	resp, err := r.s.proxy.ControlTo(ctx, r.req.Target, r.owner, req)
	if err != nil || resp.Migration == "" {
		// As libvirt's own client after a failed Prepare: a cancelled
		// Confirm ends the Begin, libvirt's job here failed again.
		confirmResume(r.log, lv, r.dom, r.resumeParams(), nil, true)
	}
	return resp, err
}

// endResume closes the attempt's own libvirt connection, if it has one.
func (r *recovery) endResume() {
	if r.lv != nil {
		r.lv.Close()
		r.lv = nil
	}
}

// resumeByLibvirt runs libvirt's Perform of the resume over src, has the
// target finish it and this node confirm it, and follows the stream as
// the monitor's route does.
func (r *recovery) resumeByLibvirt(n int, src *proxy.SourceMigration, cookie []byte) (done, resumed bool, err error) {
	lv, params := r.lv, r.resumeParams()
	resumedAt := time.Now()
	perform := append([]libvirt.TypedParam{{Field: libvirt.MigrateParamURI, Value: *libvirt.NewTypedParamValueString("unix://" + src.Paths[peer.KindMemory])}},
		params...)
	performCookie, err := lv.PerformResume(context.Background(), r.dom, perform, cookie, sourceResumeFlags, recoverAskTimeout)
	if err != nil {
		// As libvirt's own client: no Confirm; the target's Finish,
		// cancelled, puts its job back to failed (and its own wait does,
		// should this not reach it).
		r.finishResume(context.Background(), nil, true)
		src.Close("resume refused")
		return false, false, fmt.Errorf("libvirt's Perform of the resume here: %w", err)
	}
	r.log.Info("post-copy resumed by libvirt's protocol", zap.Int("attempt", n))
	fctx, stop := context.WithCancel(context.Background())
	defer stop()
	watched, confirmed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(confirmed)
		fin, ferr := r.finishResume(fctx, performCookie, false)
		if ferr != nil {
			// The target's answer is lost, not its Finish: this node's
			// side is confirmed once QEMU here says how the stream ended
			// (libvirt completes a cancelled Confirm whose QEMU has).
			r.log.Warn("the target's Finish of the resume did not answer", zap.Error(ferr))
			<-watched
		}
		confirmResume(r.log, lv, r.dom, params, fin.Cookie, ferr != nil)
	}()
	done, resumed, err = r.watch(n, src, resumedAt)
	close(watched)
	wait := recoveredWait
	if !done {
		wait = resumeAnswerWait
	}
	select {
	case <-confirmed:
	case <-time.After(wait):
		// The target's answer is late (its link down): this node's side
		// is confirmed without it.
		stop()
		<-confirmed
	}
	return done, resumed, err
}

// finishResume has the target run libvirt's Finish of the resume.
func (r *recovery) finishResume(ctx context.Context, performCookie []byte, cancelled bool) (peer.ControlResponse, error) {
	// Not cancelled, libvirt's Finish lasts until the last page: as long
	// as a post-copy's first Finish may.
	wait := postCopyFinishWait
	if cancelled {
		wait = cancelTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return r.s.proxy.ControlTo(ctx, r.req.Target, r.owner, peer.ControlRequest{Op: peer.OpResumed, Migration: r.tid, Domain: r.req.Domain,
		Cookie: performCookie, Cancelled: cancelled})
}

// confirmResume runs libvirt's Confirm of the resume on lv: completed, it
// stops this node's copy; cancelled, libvirt holds the post-copy failed
// again, or completes it if QEMU here says it has. One that fails is left
// to lv's close.
func confirmResume(log *zap.Logger, lv *libvirtx.Conn, dom libvirt.Domain, params []libvirt.TypedParam, cookie []byte, cancelled bool) {
	ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
	defer cancel()
	if err := lv.Confirm(ctx, dom, params, cookie, sourceResumeFlags, cancelled, confirmTimeout); err != nil {
		log.Warn("libvirt's Confirm of the resume here", zap.Bool("cancelled", cancelled), zap.Error(err))
	}
}
