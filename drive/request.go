package drive

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration/policy"
)

// MigrateRequest and MigrateResponse are the body and answer of
// POST /v1/migrations.
type (
	MigrateRequest  = api.MigrateRequest
	MigrateResponse = api.MigrateResponse
)

// Errors the debug API maps to status codes.
var (
	ErrBadRequest = errors.New("bad migration request")
	ErrConflict   = errors.New("conflict")
)

func validateMigrate(r MigrateRequest) error {
	var errs []string
	if r.Domain == "" {
		errs = append(errs, "domain is empty")
	}
	if _, port, err := net.SplitHostPort(r.Target); err != nil || port == "" {
		errs = append(errs, fmt.Sprintf("target %q is not the target node's proxy address HOST:PORT", r.Target))
	}
	if r.PostCopyAfterSeconds < 0 || r.PostCopyAfterSeconds > maxDeadline.Seconds() {
		errs = append(errs, fmt.Sprintf("postCopyAfterSeconds %g is outside 0 to %s", r.PostCopyAfterSeconds, maxDeadline))
	}
	switch {
	case r.DeadlineSeconds < 0 || r.DeadlineSeconds > 0 && r.DeadlineSeconds < minDeadline.Seconds():
		errs = append(errs, fmt.Sprintf("deadlineSeconds %g is below the shortest deadline, %s", r.DeadlineSeconds, minDeadline))
	case r.DeadlineSeconds > maxDeadline.Seconds():
		errs = append(errs, fmt.Sprintf("deadlineSeconds %g is past the longest, %s (a deadline can only shorten Ferry's own)", r.DeadlineSeconds, maxDeadline))
	}
	if r.BandwidthMiBs < 0 || r.PostCopyBandwidthMiBs < 0 {
		errs = append(errs, "bandwidth is negative")
	}
	if r.Parallel < 0 || r.Parallel > 64 {
		errs = append(errs, fmt.Sprintf("parallel %d is outside 0-64", r.Parallel))
	}
	switch r.Compression {
	case "", CompressionNone, CompressionAuto:
	case CompressionZstd:
		if r.Parallel < 1 {
			errs = append(errs, "compression zstd needs parallel 1 or more: QEMU compresses on multifd channels")
		}
		if why := multifdWithPostCopy(true, r.PostCopy || r.PostCopyAfterSeconds > 0); why != "" {
			errs = append(errs, why)
		}
	default:
		errs = append(errs, fmt.Sprintf("compression %q is not none, zstd or auto", r.Compression))
	}
	switch r.DataPath {
	case "", DataPathProxy:
	case DataPathDirect:
		if r.TargetNode == "" {
			errs = append(errs, "dataPath direct needs targetNode: QEMU's stream goes only to a node named by its certificate")
		}
		if host, _, err := net.SplitHostPort(r.Target); err == nil && net.ParseIP(host) == nil {
			errs = append(errs, fmt.Sprintf("dataPath direct needs the target as an IP address, not %q: the source's QEMU connects to the address its proxy answered at", host))
		}
		if r.PostCopy || r.PostCopyAfterSeconds > 0 {
			errs = append(errs, "dataPath direct cannot be had with post-copy: resuming a broken post-copy needs the proxy's streams")
		}
	default:
		errs = append(errs, fmt.Sprintf("dataPath %q is not proxy or direct", r.DataPath))
	}
	if r.TargetNode != "" {
		for _, msg := range validation.IsDNS1123Subdomain(r.TargetNode) {
			errs = append(errs, fmt.Sprintf("targetNode %q is not a node name: %s", r.TargetNode, msg))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrBadRequest, strings.Join(errs, "; "))
	}
	return nil
}

// minDeadline and maxDeadline bound the deadline a request may ask for.
// It counts from Perform; the shortest leaves QEMU's setup behind it.
const (
	minDeadline = 10 * time.Second
	maxDeadline = 20 * time.Hour
)

// deadlineFor is the migration's deadline: Ferry's own for a guest of
// memBytes at the request's bandwidth, or the request's if shorter, and
// never past maxDeadline, which the target's own bound on a migration
// (a day) stays ahead of.
func deadlineFor(req MigrateRequest, memBytes uint64) time.Duration {
	d := min(policy.DrivenDeadline(memBytes, req.BandwidthMiBs), maxDeadline)
	if d <= 0 {
		d = maxDeadline // a size past what a Duration holds
	}
	if req.DeadlineSeconds > 0 {
		d = min(d, time.Duration(req.DeadlineSeconds*float64(time.Second)))
	}
	return d
}

func newMigrationID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "m-" + hex.EncodeToString(b)
}

// migrationPolicy is the node's policy with the request's overrides.
func migrationPolicy(node policy.Settings, req MigrateRequest) (policy.Settings, error) {
	p := node
	if req.Policy != "" {
		m, err := policy.ParseMode(req.Policy)
		if err != nil {
			return p, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		p.Mode = m
	}
	// A request may only lower the node's cap: whoever may ask for a
	// migration may not thereby allow a longer guest pause than the node.
	if req.MaxDowntimeMs != 0 && req.MaxDowntimeMs < uint64(p.MaxDowntime/time.Millisecond) {
		p.MaxDowntime = time.Duration(req.MaxDowntimeMs) * time.Millisecond
	}
	// Asking for a migration with post-copy enabled allows it, as
	// KubeVirt's allowPostCopy does.
	p.AllowPostCopy = p.AllowPostCopy || req.PostCopy
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return p, nil
}

// migrateFlags are libvirt's flags and parameters for the request, the
// same for every step; Perform adds its URI. No PEER2PEER: this ferryd
// runs the protocol itself and libvirt never talks to the target's libvirt.
// CHANGE_PROTECTION, as libvirt's own client: Begin starts libvirt's job,
// so the domain's definition cannot change (a hotplug) between the XML
// sent to the target and Perform; a step that fails before Perform ends
// that job with a cancelled Confirm. A persistent domain is defined on the
// target and undefined here once it runs there, so that no second copy
// can be started from a definition left behind (see persistentFlags).
func migrateFlags(req MigrateRequest) (libvirt.DomainMigrateFlags, []libvirt.TypedParam) {
	flags := libvirt.MigrateLive | libvirt.MigrateChangeProtection
	var params []libvirt.TypedParam
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
	if req.DataPath == DataPathDirect {
		flags |= libvirt.MigrateTLS
	}
	if req.Compression == CompressionZstd {
		// zstd's level stays QEMU's default, 1: the fastest.
		flags |= libvirt.MigrateCompressed
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamCompression, Value: *libvirt.NewTypedParamValueString(CompressionZstd)})
	}
	return flags, params
}
