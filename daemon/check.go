package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/preflight"
)

// check answers whether a domain can move: GET reads its live XML, POST
// with a target also asks that target through a dry run.
func (d *Daemon) check(w http.ResponseWriter, r *http.Request) {
	name, socket := r.PathValue("name"), socketParam(r)
	var req *api.DryRunRequest
	if r.Method == http.MethodPost {
		req = &api.DryRunRequest{}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(req); err != nil {
			writeError(w, http.StatusBadRequest, "dry-run request is not valid JSON: "+err.Error())
			return
		}
		if req.Socket != "" {
			socket = filepath.Clean(req.Socket) // as ?socket= is
		}
		if d.source == nil {
			writeError(w, http.StatusConflict, "this ferryd runs without a migration proxy (--proxy-listen is empty): it has no dry run")
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	resp, err := d.checkDomain(ctx, socket, name, false)
	if err != nil {
		code := http.StatusBadGateway
		switch {
		case errors.Is(err, migration.ErrNoJob), libvirtx.IsNoDomain(err):
			code = http.StatusNotFound
		case errors.Is(err, migration.ErrAmbiguous):
			code = http.StatusConflict
		case errors.Is(err, migration.ErrNoLibvirt):
			code = http.StatusServiceUnavailable
		}
		writeError(w, code, err.Error())
		return
	}
	if req != nil {
		dr, err := d.source.DryRun(ctx, drive.MigrateRequest{Domain: name, Socket: socket, Target: req.Target, TargetNode: req.TargetNode, PostCopy: req.PostCopy, DataPath: req.DataPath})
		switch {
		case errors.Is(err, drive.ErrBadRequest):
			writeError(w, http.StatusBadRequest, err.Error())
			return
		case errors.Is(err, drive.ErrConflict):
			writeError(w, http.StatusConflict, err.Error())
			return
		case err != nil:
			writeError(w, http.StatusBadGateway, err.Error())
			return
		}
		resp.DryRun = &dr
		resp.Migratable = resp.Migratable && dr.OK
	}
	writeJSON(w, http.StatusOK, resp)
}

// checkDomain reads what the live domain holds that keeps it on this
// node, with each local disk's storage and, unless quick, its size (as
// far as libvirt answers it in time).
func (d *Daemon) checkDomain(ctx context.Context, socket, name string, quick bool) (api.CheckResponse, error) {
	resp, _, err := d.inspectDomain(ctx, socket, name, quick)
	return resp, err
}

// inspectDomain is checkDomain that also names the disk whose size the
// domain's libvirt left unanswered in time ("" if none): a plan does not
// take such a domain as measured.
func (d *Daemon) inspectDomain(ctx context.Context, socket, name string, quick bool) (resp api.CheckResponse, unsized string, err error) {
	socket, dom, err := d.Tracker.DomainRef(socket, name)
	if err != nil {
		return api.CheckResponse{}, "", err
	}
	conn, err := d.Pool.Conn(socket)
	if err != nil {
		return api.CheckResponse{}, "", fmt.Errorf("%w: %v", migration.ErrNoLibvirt, err)
	}
	xml, err := conn.DomainXML(ctx, dom)
	if err != nil {
		return api.CheckResponse{}, "", err
	}
	var def libvirtxml.Domain
	if err := def.Unmarshal(xml); err != nil {
		return api.CheckResponse{}, "", fmt.Errorf("the live XML of %s: %w", name, err)
	}
	blockers := preflight.Reasons(&def)
	if slices.Contains(d.cfg.LibvirtSockets, socket) && !blocked(blockers) {
		// A guest of the node's own libvirt may be moved by Ferry (a
		// launcher's is KubeVirt's to move), unless it cannot move at all.
		for _, what := range libvirtx.RefusedFeatures(xml) {
			blockers = append(blockers, preflight.FerryTargetRefuses(what))
		}
	}
	if !quick {
		unsized = askSizes(ctx, conn, dom, blockers)
	}
	d.judgeLocalDisks(ctx, conn, name, &def, blockers)
	// What blocks first, as preflight orders it; a disk judged since may
	// have moved.
	slices.SortStableFunc(blockers, func(a, b api.Blocker) int { return severityRank(a.Severity) - severityRank(b.Severity) })
	resp = api.CheckResponse{Node: d.cfg.NodeName, Domain: name, Migratable: true, Blockers: blockers}
	for _, b := range resp.Blockers {
		if b.Severity == api.SeverityBlocks {
			resp.Migratable = false
		}
	}
	return resp, unsized, nil
}

// judgeLocalDisks settles the storage of each local disk a migration
// would have to copy.
func (d *Daemon) judgeLocalDisks(ctx context.Context, conn *libvirtx.Conn, name string, def *libvirtxml.Domain, blockers []api.Blocker) {
	disks := map[string]preflight.Disk{}
	for _, disk := range preflight.LocalDisks(def) {
		disks[disk.Target] = disk
	}
	root := d.storageRoot(conn, name)
	for i := range blockers {
		b := &blockers[i]
		if b.Code == preflight.CodeLocalDisk && !disks[b.Device].Uncopied {
			judgeStorage(ctx, b, root)
		}
	}
}

// storageRoot is where the domain's disk paths resolve: this host's root,
// or for a QEMU in a pod, its own.
func (d *Daemon) storageRoot(conn *libvirtx.Conn, name string) string {
	if !conn.Matched() {
		return "/"
	}
	pid, err := libvirtx.QEMUPID(conn.Socket(), name)
	if err != nil {
		return ""
	}
	return "/proc/" + strconv.Itoa(pid) + "/root"
}

// judgeStorage settles a local disk the migration would have to copy, by
// its filesystem: on shared storage it only asks the target to mount it;
// on this node's own it blocks, for Ferry copies no storage; where that
// cannot be told, it is left to the dry run.
func judgeStorage(ctx context.Context, b *api.Blocker, root string) {
	// A block device's filesystem is the device directory's, whatever
	// storage is behind it.
	if root == "" || b.Path == "" || strings.HasPrefix(b.Path, "/dev/") {
		return
	}
	wait := storageWait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	if wait < 100*time.Millisecond {
		b.Message += " (its storage could not be told in time)"
		return
	}
	shared, kind, err := storageWithin(root, b.Path, wait)
	switch {
	case err != nil:
		b.Message += " (its storage could not be told: " + err.Error() + ")"
	case shared:
		b.Severity = api.SeverityWarns
		b.Message = fmt.Sprintf("disk %s is on shared storage (%s): the target must mount it at the same path", b.Device, kind)
	default:
		b.Severity = api.SeverityBlocks
		b.Message = fmt.Sprintf("disk %s (%s) is on this node's own filesystem (%s), and a live migration here copies no storage", b.Device, b.Path, kind)
	}
}

// storageLooks are the looks at a disk's filesystem under way.
var storageLooks sync.Map

// storageWait bounds the look at a disk's filesystem: beneath a pod's
// root, a FUSE or hung NFS mount could hold the lookup forever.
const storageWait = 2 * time.Second

// storageWithin is preflight.Storage given up after wait; a lookup that
// hangs keeps its thread until the kernel answers.
// One look per file at a time: a look that hangs keeps its thread, and
// asking again would only add one more each time.
func storageWithin(root, path string, wait time.Duration) (bool, string, error) {
	type answer struct {
		shared bool
		kind   string
		err    error
	}
	key := root + "\x00" + path
	if _, busy := storageLooks.LoadOrStore(key, true); busy {
		return false, "", errors.New("its filesystem has not answered an earlier look yet")
	}
	done := make(chan answer, 1)
	go func() {
		defer storageLooks.Delete(key)
		shared, kind, err := preflight.Storage(root, path)
		done <- answer{shared, kind, err}
	}()
	select {
	case a := <-done:
		return a.shared, a.kind, a.err
	case <-time.After(wait):
		return false, "", fmt.Errorf("its filesystem did not answer within %v", wait)
	}
}

func severityRank(s api.Severity) int {
	if s == api.SeverityBlocks {
		return 0
	}
	return 1
}

// dirtyRate is a domain's measured dirty rate, if it has been measured.
func (d *Daemon) dirtyRate(socket, domain string) (uint64, bool) {
	if d.meter == nil {
		return 0, false
	}
	return d.meter.Rate(socket, domain)
}

// quiet holds the dirty-rate measurements off a domain about to migrate.
func (d *Daemon) quiet(ctx context.Context, socket, domain string) func() {
	if d.meter == nil {
		return func() {}
	}
	return d.meter.Quiet(ctx, socket, domain)
}

// Bounds on the checks a domain list makes: a few at once, and the list
// answers in a few seconds however many domains a node runs, leaving the
// rest unchecked (CheckError says so).
const (
	listChecksAtOnce = 4
	listChecksFor    = 5 * time.Second
)

// annotateMigratable checks each running domain as `ferryctl check` does
// without a target (but for disk sizes): its live XML, read anew, since a
// hot-plugged device changes the answer. The bound on checks at once is
// the daemon's, whoever asks: a node of 200 domains listed by many
// callers still asks its libvirt a few at a time.
func (d *Daemon) annotateMigratable(ctx context.Context, doms []api.Domain) {
	ctx, cancel := context.WithTimeout(ctx, listChecksFor)
	defer cancel()
	sem := d.listChecks
	var wg sync.WaitGroup
	for i := range doms {
		dom := &doms[i]
		if dom.State != libvirtx.StateRunning.String() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			notChecked := "not checked: the list's " + listChecksFor.String() + " for checks ran out"
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				dom.CheckError = notChecked
				return
			}
			if ctx.Err() != nil {
				dom.CheckError = notChecked
				return
			}
			r, err := d.checkDomain(ctx, dom.Socket, dom.Name, true)
			if err != nil {
				dom.CheckError = err.Error()
				return
			}
			dom.Migratable = &r.Migratable
			for _, b := range r.Blockers {
				if b.Severity == api.SeverityBlocks {
					dom.BlockedBy = b.Code
					break
				}
			}
		}()
	}
	wg.Wait()
}

// blocked says whether any of blockers keeps the domain here.
func blocked(blockers []api.Blocker) bool {
	return slices.ContainsFunc(blockers, func(b api.Blocker) bool { return b.Severity == api.SeverityBlocks })
}
