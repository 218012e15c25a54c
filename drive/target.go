package drive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/ferry-vm/ferry/internal/faults"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// Target runs the target's side of Ferry-driven migrations on this
// node's libvirt: the proxy hands it the control requests of peers.
//
// It uses the node's first fixed --libvirt-socket: a Ferry-driven
// migration targets the node's own libvirtd, and a domain that does not
// exist yet cannot pick a socket for itself. A ferryd watching only a glob
// (KubeVirt, one libvirt per pod) takes no Ferry-driven migrations.
type Target struct {
	tracker Jobs   // what the record shows, read
	books   *Books // the driver's own account
	trials  *Trials
	conns   Conns
	socket  string
	policy  libvirtx.IncomingPolicy
	log     *zap.Logger
	// recoverFor bounds how long this node holds a broken post-copy for
	// its source to resume it.
	recoverFor time.Duration
	// adoptDefined lets a migration in take over a shut-off definition
	// of its name (see refuseDefinedHere).
	adoptDefined bool
	// stateDir holds the definitions kept for guests that left (kept.go).
	stateDir string

	// checking makes a prepare's check of other guests' files and the
	// noting of its own one step (checkAndAdmit), one prepare at a time;
	// a prepare whose peer gives up while it waits leaves.
	checkOnce sync.Once
	checking  chan struct{}
	// own holds each prepared migration's libvirt connection, by id: the
	// target QEMU lives until its Finish or until the connection that
	// prepared it closes, so it is never the pool's, which a missed ping
	// cuts.
	mu  sync.Mutex
	own map[string]*libvirtx.Conn
	// resumes are the connections of resumes prepared by libvirt's own
	// protocol, by migration id, kept until their Finish.
	resumes map[string]*libvirtx.Conn
	// lingering counts connections kept for a late Prepare's undo.
	lingering int
	// definitions are the checked persistent definitions of guests being
	// migrated, by id, which libvirt's Finish saves before it starts the
	// guest here (see finishCookie).
	definitions map[string]string
	// dryRuns end the trial hold of each dry run's guest, by id.
	dryRuns map[string]func()
	// admitted are the guests coming here, by migration id, whose memory
	// the next ones are admitted against (see target_admission.go); memory is
	// what tells the node's memory, /proc's when nil.
	admitted map[string]incomingGuest
	memory   memorySource
}

// NewTarget builds the target side on the libvirt at socket, taking what
// pol allows.
func NewTarget(rec Record, conns Conns, socket string, pol libvirtx.IncomingPolicy, recoverFor time.Duration, log *zap.Logger) *Target {
	return &Target{tracker: rec.Jobs, books: rec.Books, trials: rec.Trials, conns: conns, socket: socket, policy: pol, recoverFor: recoverFor, log: log}
}

// Persisted says whether the migration's guest is defined persistently
// here, as libvirt has it: its Finish saved the definition before it
// started the guest, and a guest that was already defined here stays so.
func (in *Target) Persisted(ctx context.Context, m peer.IncomingMigration) bool {
	c, err := in.conn()
	if err != nil {
		return false
	}
	dom, err := c.LookupDomain(ctx, m.Domain)
	if err != nil || !sameInstance(m.Instance, dom) {
		return false
	}
	persistent, err := c.Persistent(ctx, dom)
	return err == nil && persistent
}

// ownConn is migration id's own connection, or the pool's for one this
// process did not prepare (a restart since).
func (in *Target) ownConn(id string) (*libvirtx.Conn, error) {
	in.mu.Lock()
	c := in.own[id]
	in.mu.Unlock()
	if c != nil {
		return c, nil
	}
	return in.conn()
}

// liveConn is migration id's own connection while it is open, and the
// pool's once it closed.
func (in *Target) liveConn(id string) (*libvirtx.Conn, error) {
	c, err := in.ownConn(id)
	if err == nil && isClosed(c.Done()) {
		return in.conn()
	}
	return c, err
}

// release closes migration id's own connection once its target QEMU no
// longer depends on it.
func (in *Target) release(id string) {
	in.endTrial(id)
	in.mu.Lock()
	c := in.own[id]
	delete(in.own, id)
	delete(in.admitted, id)
	in.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

func (in *Target) forgetDefinition(id string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.definitions, id)
}

// trial keeps the end of a dry run's hold until its guest is stopped.
func (in *Target) trial(id string, end func()) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.dryRuns == nil {
		in.dryRuns = map[string]func(){}
	}
	in.dryRuns[id] = end
}

func (in *Target) endTrial(id string) {
	in.mu.Lock()
	end := in.dryRuns[id]
	delete(in.dryRuns, id)
	in.mu.Unlock()
	if end != nil {
		end()
	}
}

// allowedIncomingFlags is what a peer may ask of this node's libvirt: the
// modes Ferry drives, the source's change protection, and a persistent
// domain's definition here. That one reaches libvirt only at Finish, and
// only with this node's checked definition in the cookie (see
// finishCookie): the source's Perform cookie would carry its own bytes.
const allowedIncomingFlags = libvirt.MigrateLive | libvirt.MigratePostcopy | libvirt.MigrateAutoConverge | libvirt.MigrateParallel |
	libvirt.MigrateChangeProtection | libvirt.MigratePersistDest | libvirt.MigrateCompressed

// libvirtFlags are a migration's flags as this node's libvirt gets them
// at Prepare and at a cancelled Finish.
func libvirtFlags(m peer.IncomingMigration) libvirt.DomainMigrateFlags {
	return libvirt.DomainMigrateFlags(m.Flags) &^ libvirt.MigratePersistDest
}

func (in *Target) conn() (*libvirtx.Conn, error) {
	c, err := in.conns.Conn(in.socket)
	if err != nil {
		return nil, &peer.Refusal{Reason: ReasonLibvirtUnavailable, Msg: "this node's libvirt is not connected"}
	}
	return c, nil
}

// Check refuses flags and XML a prepare may not ask for, before the
// proxy registers anything for it.
func (in *Target) Check(m peer.IncomingMigration, domXML string) (*peer.CheckedXML, error) {
	live, config, err := in.check(m, domXML)
	if err != nil {
		return nil, err
	}
	return &peer.CheckedXML{Live: live, Config: config}, nil
}

// checked is the proxy's check of m's XML where it ran one (in the peer's
// turn), else a check now.
func (in *Target) checked(m peer.IncomingMigration, domXML string) (live, config string, err error) {
	if c := m.Checked; c != nil {
		return c.Live, c.Config, nil
	}
	return in.check(m, domXML)
}

// check returns the XML to give libvirt, the checked domain, never the
// peer's bytes; and for a persistent guest the definition to keep here,
// checked the same way.
func (in *Target) check(m peer.IncomingMigration, domXML string) (live, config string, err error) {
	if live, err = in.checkFlags(m, domXML); err != nil {
		return "", "", err
	}
	if libvirt.DomainMigrateFlags(m.Flags)&libvirt.MigratePersistDest == 0 {
		if m.Config != "" {
			return "", "", &peer.Refusal{Reason: "invalid_domain_xml", Msg: "a persistent definition came with a migration that keeps none (no persist-dest flag)"}
		}
		return live, "", nil
	}
	if m.Config == "" {
		// A source that sends no definition: the live XML is the best
		// there is, as libvirt itself keeps with no definition in the
		// cookie.
		return live, live, nil
	}
	if config, err = libvirtx.CanonicalIncomingXML(m.Config, m.Domain, in.policy); err != nil {
		return "", "", &peer.Refusal{Reason: "invalid_domain_xml", Msg: "the persistent definition: " + err.Error()}
	}
	lu, err1 := libvirtx.DomainUUID(live)
	cu, err2 := libvirtx.DomainUUID(config)
	if err1 != nil || err2 != nil || lu != cu {
		return "", "", &peer.Refusal{Reason: "invalid_domain_xml", Msg: fmt.Sprintf("the persistent definition names UUID %q, the live XML %q: not one guest", cu, lu)}
	}
	return live, config, nil
}

// checkFlags checks the flags and the live XML.
func (in *Target) checkFlags(m peer.IncomingMigration, domXML string) (string, error) {
	flags := libvirt.DomainMigrateFlags(m.Flags)
	allowed := allowedIncomingFlags
	if m.DiskURI != "" {
		allowed |= libvirt.MigrateNonSharedDisk
	}
	if m.Direct != (flags&libvirt.MigrateTLS != 0) {
		// QEMU's own TLS is the direct path's, and the proxy's path has
		// its own: the flag and the path come together or not at all.
		return "", &peer.Refusal{Reason: "flags_not_allowed", Msg: fmt.Sprintf("the TLS flag goes with the direct path and only with it (direct %v, flags %#x)", m.Direct, uint32(flags))}
	}
	if m.Direct {
		allowed |= libvirt.MigrateTLS
	}
	if extra := flags &^ allowed; extra != 0 {
		return "", &peer.Refusal{Reason: "flags_not_allowed", Msg: fmt.Sprintf("migration flags %#x are not taken here (only live, post-copy, auto-converge, parallel, compressed, change protection, and a persistent domain's persist-dest with undefine-source)", uint32(extra))}
	}
	if flags&libvirt.MigrateCompressed != 0 && (flags&libvirt.MigrateParallel == 0 || m.Parallel < 1) {
		// Ferry's compression is zstd on multifd channels, the only kind
		// this node prepares; libvirt would take the flag alone for
		// another method.
		return "", &peer.Refusal{Reason: "flags_not_allowed", Msg: "compression is taken only with parallel (multifd) connections"}
	}
	if why := multifdWithPostCopy(flags&libvirt.MigrateParallel != 0, flags&libvirt.MigratePostcopy != 0); why != "" {
		return "", &peer.Refusal{Reason: "flags_not_allowed", Msg: why}
	}
	if m.PostCopy != (flags&libvirt.MigratePostcopy != 0) {
		// The streams were counted for one mode; libvirt would run the
		// other.
		return "", &peer.Refusal{Reason: "flags_not_allowed", Msg: fmt.Sprintf("postCopy %v does not match the migration flags %#x", m.PostCopy, uint32(flags))}
	}
	canon, err := libvirtx.CanonicalIncomingXML(domXML, m.Domain, in.policy)
	if err != nil {
		return "", &peer.Refusal{Reason: "invalid_domain_xml", Msg: err.Error()}
	}
	return canon, nil
}

func (in *Target) Prepare(ctx context.Context, m peer.IncomingMigration, domXML string, cookie []byte) ([]byte, error) {
	p, err := in.prepare(ctx, m, domXML, cookie)
	return p.Cookie, err
}

// PrepareDirect prepares a migration whose stream comes straight from the
// source's QEMU (see peer.Incoming.PrepareDirect): the answer says where this
// node's QEMU listens.
func (in *Target) PrepareDirect(ctx context.Context, m peer.IncomingMigration, domXML string, cookie []byte) ([]byte, string, error) {
	if !m.Direct {
		return nil, "", errors.New("not a direct migration")
	}
	p, err := in.prepare(ctx, m, domXML, cookie)
	if err == nil && p.URI == "" {
		err = errors.New("libvirt's Prepare named no address for the target QEMU")
		in.Cancel(context.Background(), m)
	}
	return p.Cookie, p.URI, err
}

func (in *Target) prepare(ctx context.Context, m peer.IncomingMigration, domXML string, cookie []byte) (libvirtx.Prepared, error) {
	var none libvirtx.Prepared
	flags := libvirtFlags(m)
	domXML, config, err := in.checked(m, domXML)
	if err != nil {
		return none, err
	}
	pooled, err := in.conn()
	if err != nil {
		return none, err
	}
	if why, err := multifdInto(ctx, pooled, flags&libvirt.MigrateParallel != 0); err != nil || why != "" {
		if err == nil {
			err = &peer.Refusal{Reason: "flags_not_allowed", Msg: why}
		}
		return none, err
	}
	c, uuid, err := in.checkAndAdmit(ctx, pooled, m, domXML, config)
	if err != nil {
		return none, err
	}
	admitted := false
	defer func() {
		if !admitted {
			in.unadmit(m.ID)
		}
	}()
	if m.DryRun {
		// The guest a dry run starts is no migration, until well after
		// Cancel (see release) has stopped it.
		in.trial(m.ID, in.trials.Hold(in.socket, m.Domain))
	} else {
		in.trials.End(in.socket, m.Domain)
	}
	// The target job appears while Prepare runs; it names the peer from
	// its first moment.
	in.books.ExpectIncoming(in.socket, m.Domain, m.ID, m.PeerNode)
	if hold := min(in.recoverFor, m.RecoverFor); m.PostCopy && m.MonitorPath != "" && hold > 0 {
		// Held as long as the source resumes it, or this node's own
		// bound if that is shorter.
		in.books.IncomingRecoverable(in.socket, m.Domain, m.ID, hold)
	}
	ok := false
	defer func() {
		if !ok {
			in.books.ForgetIncoming(in.socket, m.Domain, m.ID)
		}
	}()
	// A post-copy guest whose migration libvirt here cannot resume itself
	// gets a monitor of Ferry's own, to resume it through should the
	// streams break (see source_recover.go). Not in its persistent
	// definition: it is for this migration only.
	runXML := domXML
	if m.PostCopy && m.MonitorPath != "" && !m.LibvirtResume {
		if runXML, err = libvirtx.WithRecoveryMonitor(domXML, m.MonitorPath); err != nil {
			in.endTrial(m.ID)
			c.Close()
			return none, err
		}
	}
	params := prepareParams(m, runXML, flags)
	wait := until(ctx)
	if faults.Inject(faults.LatePrepare) {
		wait = time.Millisecond
	}
	prepared, err := c.PrepareURI(ctx, params, cookie, flags, wait)
	ok = err == nil
	if err != nil {
		in.endTrial(m.ID)
		// A Prepare this node gave up on may still complete in libvirt,
		// and is undone on this connection when it does (see libvirtx's
		// Prepare): only then does the connection stay open a while, and
		// only so many at once. One libvirt answered is closed now.
		if errors.Is(err, libvirtx.ErrTimeout) && in.linger(c) {
			return none, PeerError(err)
		}
		c.Close()
		return none, postCopyIntoWhy(PeerError(err), m.PostCopy)
	}
	in.keep(m, c, config)
	admitted = true
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	in.prepared(m.ID, startedID(sctx, c, m.Domain, uuid))
	cancel()
	return prepared, nil
}

// checkAndAdmit checks that the guest (of the UUID it returns) takes no
// other guest's files, admits it against the node's memory and opens its
// own connection, and
// notes its files for the next prepare's check before its Prepare makes
// it a domain of libvirt's; one prepare at a time, so that two guests
// naming one file never both pass (see target_coming.go).
func (in *Target) checkAndAdmit(ctx context.Context, pooled *libvirtx.Conn, m peer.IncomingMigration, domXML, config string) (*libvirtx.Conn, string, error) {
	select {
	case in.checkOne() <- struct{}{}:
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
	defer func() { <-in.checkOne() }()
	in.mu.Lock()
	in.forgetArrivedLocked()
	in.mu.Unlock()
	uuid, files, err := in.takesNoOtherGuestsFiles(ctx, pooled, domXML, config)
	if err != nil {
		return nil, "", err
	}
	if err := in.admit(m.ID, m.Domain, domXML); err != nil {
		return nil, "", err
	}
	c, err := in.connFor(ctx, pooled, m, domXML)
	if err != nil {
		in.unadmit(m.ID)
		return nil, "", err
	}
	in.noteComingFiles(m.ID, uuid, files)
	return c, uuid, nil
}

func (in *Target) checkOne() chan struct{} {
	in.checkOnce.Do(func() { in.checking = make(chan struct{}, 1) })
	return in.checking
}

// connFor opens the migration's own libvirt connection, once neither a
// running domain of its name nor another guest's definition of its UUID
// is in its way here.
func (in *Target) connFor(ctx context.Context, pooled *libvirtx.Conn, m peer.IncomingMigration, domXML string) (*libvirtx.Conn, error) {
	c, err := pooled.Another(ctx)
	if err != nil {
		return nil, PeerError(err)
	}
	active, err := c.ActiveDomain(ctx, m.Domain)
	if err != nil || active {
		c.Close()
	}
	if err != nil {
		return nil, PeerError(err)
	}
	if active {
		return nil, &peer.Refusal{Reason: "domain_exists", Msg: fmt.Sprintf("domain %s already runs on this node", m.Domain)}
	}
	uuid, err := libvirtx.DomainUUID(domXML)
	if err != nil {
		c.Close()
		return nil, &peer.Refusal{Reason: "invalid_domain_xml", Msg: err.Error()}
	}
	if err := in.refuseDefinedHere(ctx, c, m, uuid); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// prepareParams are libvirt's Prepare parameters for m.
func prepareParams(m peer.IncomingMigration, runXML string, flags libvirt.DomainMigrateFlags) []libvirt.TypedParam {
	params := []libvirt.TypedParam{
		{Field: libvirt.MigrateParamDestXML, Value: *libvirt.NewTypedParamValueString(runXML)},
		{Field: libvirt.MigrateParamURI, Value: *libvirt.NewTypedParamValueString(m.MemoryURI)},
		// The name checked and registered, whatever else the XML says.
		{Field: libvirt.MigrateParamDestName, Value: *libvirt.NewTypedParamValueString(m.Domain)},
	}
	if flags&libvirt.MigrateParallel != 0 && m.Parallel > 0 {
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamParallelConnections, Value: *libvirt.NewTypedParamValueInt(int32(m.Parallel))})
	}
	if flags&libvirt.MigrateCompressed != 0 {
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamCompression, Value: *libvirt.NewTypedParamValueString(CompressionZstd)})
	}
	if m.DiskURI != "" {
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamDisksURI, Value: *libvirt.NewTypedParamValueString(m.DiskURI)})
	}
	if m.Direct {
		// The target QEMU listens on the address the source reached this
		// node at, not on every address libvirt would bind.
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamListenAddress, Value: *libvirt.NewTypedParamValueString(m.ListenAddress)})
	}
	return params
}

// keep holds what a prepared migration's finish needs: its connection,
// on which libvirt keeps its state, and the definition it saves.
func (in *Target) keep(m peer.IncomingMigration, c *libvirtx.Conn, config string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if config != "" && !m.DryRun {
		if in.definitions == nil {
			in.definitions = map[string]string{}
		}
		in.definitions[m.ID] = config
	}
	if in.own == nil {
		in.own = map[string]*libvirtx.Conn{}
	}
	in.own[m.ID] = c
}

// lateUndoWindow is how long a timed-out Prepare's connection waits for
// a late answer to undo, and maxLingering how many wait at once.
const (
	lateUndoWindow = 10 * time.Minute
	maxLingering   = proxy.MaxIncoming
)

// linger keeps c open for lateUndoWindow, if fewer than maxLingering are.
func (in *Target) linger(c *libvirtx.Conn) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.lingering >= maxLingering {
		return false
	}
	in.lingering++
	time.AfterFunc(lateUndoWindow, func() {
		c.Close()
		in.mu.Lock()
		in.lingering--
		in.mu.Unlock()
	})
	return true
}

func (in *Target) Finish(ctx context.Context, m peer.IncomingMigration, cookie []byte, cancelled bool) ([]byte, error) {
	if cancelled {
		if why, held := in.Held(ctx, m); held {
			// The source's Perform failed after the switch: the guest
			// runs here, and its outcome (split) is asked for next.
			return nil, fmt.Errorf("not cancelled: %s", why)
		}
	}
	c, err := in.ownConn(m.ID)
	if err != nil {
		return nil, err
	}
	defer func() {
		// A Finish this node gave up on (its shutdown) may still run in
		// libvirt, and closing its connection would make libvirt destroy
		// the target QEMU: the connection stays for the process's life.
		if ctx.Err() == nil {
			in.release(m.ID)
		}
	}()
	flags := libvirtFlags(m)
	if !cancelled {
		var err error
		if cookie, flags, err = in.finishCookie(m, cookie, flags); err != nil {
			// The guest is not started without the definition it must
			// keep: the source's copy runs on.
			c.Finish(ctx, finishParams(m), nil, libvirtFlags(m), true, until(ctx))
			return nil, err
		}
	}
	if !cancelled {
		in.finishing(m.ID)
	}
	// No bound of Ferry's own: in post-copy libvirt's Finish lasts until
	// the last page, and giving up on it would cut the streams it needs.
	ck, err := c.Finish(ctx, finishParams(m), cookie, flags, cancelled, untilOr(ctx, unbounded))
	if !cancelled {
		// Whether libvirt's Finish returned or this node stopped waiting
		// for it (a recovery took over, a shutdown): libvirt is asked.
		in.finished(m.ID)
		in.forgetDefinition(m.ID)
	}
	if err == nil && !cancelled {
		// Back on the definition kept for it, if that is where it came.
		forgetKept(in.stateDir, instanceUUID(m.Instance))
	}
	return ck, PeerError(err)
}

// finishCookie gives libvirt's Finish of a persistent guest this node's
// checked definition in the cookie, and PERSIST_DEST: libvirt saves it
// before it starts the guest's vCPUs, and fails the Finish (stopping the
// guest here, so that the source's runs on) when it cannot. A guest that
// runs here is then always defined here, as libvirt's own client does it,
// and never by a Define of a running transient guest, whose failure
// libvirt answers by dropping the guest from its list while QEMU runs on.
func (in *Target) finishCookie(m peer.IncomingMigration, cookie []byte, flags libvirt.DomainMigrateFlags) ([]byte, libvirt.DomainMigrateFlags, error) {
	in.mu.Lock()
	def, ok := in.definitions[m.ID]
	in.mu.Unlock()
	if !ok {
		return cookie, flags, nil
	}
	withDef, err := libvirtx.WithPersistentDefinition(cookie, def)
	if err != nil {
		return nil, flags, fmt.Errorf("the source's Perform cookie cannot carry the guest's definition: %w", err)
	}
	return withDef, flags | libvirt.MigratePersistDest, nil
}

// Instance names the guest a Prepare just started: its libvirt domain ID,
// which no later domain of this libvirtd takes, and its UUID.
func (in *Target) Instance(ctx context.Context, m peer.IncomingMigration) (string, error) {
	c, err := in.ownConn(m.ID)
	if err != nil {
		return "", err
	}
	dom, err := c.LookupDomain(ctx, m.Domain)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d/%s", dom.ID, libvirtx.UUIDString(dom.UUID)), nil
}

// instanceUUID is the UUID an instance names.
func instanceUUID(instance string) string {
	_, uuid, _ := strings.Cut(instance, "/")
	return uuid
}

// sameInstance says whether dom is the guest instance names; a domain
// shut off since (no ID any more) is matched by its UUID.
func sameInstance(instance string, dom libvirt.Domain) bool {
	if instance == "" {
		return true // recorded before instances were named
	}
	id, uuid, _ := strings.Cut(instance, "/")
	if uuid != libvirtx.UUIDString(dom.UUID) {
		return false
	}
	return dom.ID <= 0 || id == strconv.Itoa(int(dom.ID))
}

// Outcome says whether the migration's domain runs on this node now, as
// libvirt has it once no job of it runs: running, stopped (absent, or
// defined and shut off), or split (a failed post-copy left part of its
// memory on the source: neither copy may go).
func (in *Target) Outcome(ctx context.Context, m peer.IncomingMigration) (string, error) {
	c, err := in.conn()
	if err != nil {
		return "", err
	}
	dom, err := c.LookupDomain(ctx, m.Domain)
	if libvirtx.IsNoDomain(err) {
		return peer.OutcomeStopped, nil
	}
	if err != nil {
		return "", err
	}
	if !sameInstance(m.Instance, dom) {
		// Another domain took the name since: libvirt names are unique,
		// so the migration's own guest is not here.
		return peer.OutcomeStopped, nil
	}
	// The state first: a failed post-copy holds libvirt's incoming job on
	// the domain (and libvirt answers no job statistics on a target), yet
	// it is settled: split.
	state, reason, err := c.DomainState(ctx, dom)
	switch {
	case libvirtx.IsNoDomain(err):
		return peer.OutcomeStopped, nil
	case err != nil:
		return "", err
	case state == libvirtx.StateRunning && reason == int32(libvirt.DomainRunningPostcopyFailed),
		state == libvirtx.StatePaused && reason == int32(libvirt.DomainPausedPostcopyFailed):
		return peer.OutcomeSplit, nil
	case state == libvirtx.StateShutoff && libvirtx.StoppedIncoming(reason):
		// libvirt stopped it before handing it over, and it is still
		// defined here: an inactive definition it came into (an earlier
		// migration's), never proof that it ran. A guest that ran and was
		// destroyed since is told apart by the proxy's records: a Finish
		// that returned is kept as running, one under way as unknown.
		return peer.OutcomeStopped, nil
	case state == libvirtx.StateShutoff:
		// It ran here, and stopped since (powered off, crashed): the
		// source's copy is older than what ran, and must never resume.
		return peer.OutcomeRunning, nil
	}
	if st, jerr := c.JobStats(ctx, dom, false); jerr != nil || st.Type.Active() {
		return "", fmt.Errorf("domain %s still has a libvirt job (%v)", m.Domain, jerr)
	}
	// Only states that mean the guest was handed over settle as running;
	// anything else (post-copy still under way) is asked about again.
	switch {
	case state == libvirtx.StateRunning && reason != int32(libvirt.DomainRunningPostcopy),
		state == libvirtx.StatePaused && reason != int32(libvirt.DomainPausedPostcopy) && reason != int32(libvirt.DomainPausedMigration):
		return peer.OutcomeRunning, nil
	}
	return "", fmt.Errorf("domain %s is %s (reason %d): not settled", m.Domain, state, reason)
}

// Held says whether the migration's guest runs here in post-copy (or its
// post-copy failed here): its vCPUs run on pages pulled through the
// migration's streams, and a cancel would kill the only copy that runs.
func (in *Target) Held(ctx context.Context, m peer.IncomingMigration) (string, bool) {
	// The migration's own connection: the pool's may be cut (one missed
	// ping) exactly when this is asked. Once the own one is closed (its
	// libvirtd restarted) the pool's, which reconnects, is asked instead.
	// What cannot be told keeps the guest: a cancel or a drop is never
	// undone.
	c, err := in.liveConn(m.ID)
	if err != nil {
		return "this node's libvirt cannot be asked whether the guest runs here in post-copy", true
	}
	return heldHere(ctx, c, m)
}

// heldHere says whether c's libvirt holds m's guest in post-copy, or
// cannot tell (held, to be safe).
func heldHere(ctx context.Context, c *libvirtx.Conn, m peer.IncomingMigration) (string, bool) {
	dom, err := c.LookupDomain(ctx, m.Domain)
	if libvirtx.IsNoDomain(err) || err == nil && !sameInstance(m.Instance, dom) {
		return "", false
	}
	if err != nil {
		return fmt.Sprintf("cannot tell whether the guest runs here in post-copy: %v", PeerError(err)), true
	}
	state, reason, err := c.DomainState(ctx, dom)
	switch {
	case libvirtx.IsNoDomain(err):
		return "", false
	case err != nil:
		return fmt.Sprintf("cannot tell whether the guest runs here in post-copy: %v", PeerError(err)), true
	case !libvirtx.InPostCopy(state, reason):
		return "", false
	}
	return fmt.Sprintf("the guest is %s (reason %d) here: in post-copy", state, reason), true
}

// Cancel ends a prepared migration. libvirt's Finish answers a cancel with
// an error even when it killed the target QEMU as asked, so what counts is
// whether the domain still runs afterwards. A guest in post-copy here is
// never cancelled: it is the copy that runs.
func (in *Target) Cancel(ctx context.Context, m peer.IncomingMigration) error {
	if m.DryRun {
		// No stream ever came: its connection goes whatever libvirt
		// answers below, and with it any guest the Finish left.
		defer in.release(m.ID)
	} else if why, held := in.Held(ctx, m); held {
		return fmt.Errorf("not cancelled: %s", why)
	}
	in.books.ForgetIncoming(in.socket, m.Domain, m.ID)
	c, err := in.ownConn(m.ID)
	if err != nil {
		return err
	}
	defer in.release(m.ID)
	if m.Instance != "" {
		// Only the guest this migration started is cancelled, never a
		// domain given its name since.
		dom, err := c.LookupDomain(ctx, m.Domain)
		if libvirtx.IsNoDomain(err) || err == nil && !sameInstance(m.Instance, dom) {
			return nil
		}
	}
	_, ferr := c.Finish(ctx, finishParams(m), nil, libvirtFlags(m), true, until(ctx))
	active, aerr := c.ActiveDomain(ctx, m.Domain)
	if aerr == nil && !active {
		// Never to be defined here: its checked definition goes.
		in.forgetDefinition(m.ID)
	}
	switch {
	case aerr != nil:
		return PeerError(aerr)
	case active && ferr != nil:
		return fmt.Errorf("domain %s still runs after the cancel: %w", m.Domain, PeerError(ferr))
	case active:
		return fmt.Errorf("domain %s still runs after the cancel", m.Domain)
	}
	if ferr != nil {
		in.log.Debug("libvirt's Finish of a cancelled migration", zap.String("domain", m.Domain), zap.Error(ferr))
	}
	return nil
}

// finishParams name the domain, which is how libvirt's Finish finds it.
func finishParams(m peer.IncomingMigration) []libvirt.TypedParam {
	return []libvirt.TypedParam{
		{Field: libvirt.MigrateParamDestName, Value: *libvirt.NewTypedParamValueString(m.Domain)},
		{Field: libvirt.MigrateParamURI, Value: *libvirt.NewTypedParamValueString(m.MemoryURI)},
	}
}

// until is what is left of ctx's deadline, for libvirtx's own timeouts.
func until(ctx context.Context) time.Duration { return untilOr(ctx, time.Minute) }

// untilOr is the time left to ctx's deadline, or def if it has none.
func untilOr(ctx context.Context, def time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return def
}

// unbounded is a wait with no bound of Ferry's own: only its context ends it.
const unbounded = 100 * 365 * 24 * time.Hour

// PeerError drops the libvirt socket path a libvirtx error names: the
// answer goes to another node.
func PeerError(err error) error {
	var ce *libvirtx.CallError
	if !errors.As(err, &ce) {
		return err
	}
	if connectionLost(ce.Err) {
		// No answer from libvirtd at all: the connection is gone, which
		// the source must hear as this node's hypervisor being away, not
		// as libvirt refusing the migration.
		return &peer.Refusal{Reason: ReasonLibvirtUnavailable, Msg: fmt.Sprintf("this node's libvirt did not answer %s (its connection is gone)", ce.Op)}
	}
	return fmt.Errorf("libvirt %s: %w", ce.Op, ce.Err)
}

// connectionLost: the errors of a libvirt connection that broke or was
// never there, as go-libvirt and the socket give them (go-libvirt answers
// a call on a connection it knows is gone with a bare EINVAL). A slow
// libvirtd (libvirtx.ErrTimeout) or one that answered with an error is
// not one.
func connectionLost(err error) bool {
	for _, lost := range []error{libvirt.ErrInterrupted, io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,
		syscall.EPIPE, syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ENOENT, syscall.EINVAL} {
		if errors.Is(err, lost) {
			return true
		}
	}
	return false
}

// ReasonLibvirtUnavailable is the refusal of a prepare this node's
// libvirtd was not there to take.
const ReasonLibvirtUnavailable = "libvirt_unavailable"

// onlineCPUs counts the node's CPUs, not those ferryd's own affinity (a
// cpuset, the kubelet's pool) leaves it.
func onlineCPUs() uint {
	if b, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		if n, ok := countCPUList(string(b)); ok {
			return n
		}
	}
	return uint(runtime.NumCPU())
}

// countCPUList counts a kernel CPU list such as "0-3,8,10-11".
func countCPUList(list string) (uint, bool) {
	var n uint
	for _, r := range strings.Split(strings.TrimSpace(list), ",") {
		lo, hi, found := strings.Cut(r, "-")
		first, err1 := strconv.Atoi(lo)
		last := first
		var err2 error
		if found {
			last, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || last < first {
			return 0, false
		}
		n += uint(last - first + 1)
	}
	return n, true
}

// NodePolicy is what this node lets an incoming domain bring: the
// operator's paths, console dirs, bridges and networks, and no more memory
// or vCPUs than the node itself has.
func NodePolicy(paths, consoleDirs, bridges, networks []string) libvirtx.IncomingPolicy {
	pol := libvirtx.IncomingPolicy{AllowedPaths: paths, ConsoleDirs: consoleDirs, AllowedBridges: bridges, AllowedNetworks: networks, MaxVCPUs: onlineCPUs()}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		pol.MaxMemoryKiB = uint64(si.Totalram) * uint64(si.Unit) / 1024
	}
	return pol
}

// QEMU is the process ID of the QEMU this node's libvirt runs for domain,
// from libvirt's own pid file (see libvirtx.QEMUPID).
func (in *Target) QEMU(domain string) (int, error) {
	return libvirtx.QEMUPID(in.socket, domain)
}

// Every method the proxy calls on a target is in peer.Incoming, required:
// one renamed on either side fails here, never silently switches off a
// rule (Held is the rule never to drop a guest running here in post-copy).
var _ peer.Incoming = (*Target)(nil)
