package libvirtx

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"
)

// MinLibvirt is the oldest libvirt Ferry serves: the oldest it is tested
// on (Debian 12's 9.0). A socket whose libvirt is older is refused, with
// what it lacks that a probe can tell; the node's other sockets are served.
const MinLibvirt = 9_000_000

// ErrTooOld marks a libvirt older than MinLibvirt.
var ErrTooOld = errors.New("libvirt too old for Ferry")

// Abilities is what a libvirt told and showed when ferryd connected.
type Abilities struct {
	// Libvirt is its version as libvirt numbers them (major*1,000,000 +
	// minor*1,000 + micro).
	Libvirt uint64
	// Lacks names what Ferry uses that this libvirt does not serve.
	Lacks []string
}

// probes are calls Ferry makes whose absence a libvirt shows: each is made
// on a domain no libvirt holds, which any libvirt that serves the call
// answers "no domain", and one that does not, "unknown procedure".
var probes = []struct {
	what string
	call func(*libvirt.Libvirt, libvirt.Domain) error
}{
	{"virDomainAbortJobFlags (libvirt 8.5): pausing a post-copy for its recovery (abort --force)",
		func(l *libvirt.Libvirt, d libvirt.Domain) error {
			return l.DomainAbortJobFlags(d, uint32(libvirt.DomainAbortJobPostcopy))
		}},
}

// probeDomain is a domain no libvirt holds: libvirt finds a domain by its
// UUID, and a random one is no guest's.
func probeDomain() libvirt.Domain {
	d := libvirt.Domain{Name: "ferry-probe"}
	rand.Read(d.UUID[:])
	return d
}

// Abilities asks the libvirt behind c what it is and, when it is older
// than MinLibvirt, which of the calls Ferry makes it does not serve, for
// its refusal to name (every libvirt Ferry serves has them all, so one it
// serves is asked nothing more). Only the version can fail it: a probe
// that says neither "no domain" nor "unknown procedure" (a call that
// times out) names no lack, and the caller still refuses by version.
func (c *Conn) Abilities(ctx context.Context) (Abilities, error) {
	var a Abilities
	var err error
	if a.Libvirt, err = c.Ping(ctx); err != nil || a.Libvirt >= MinLibvirt {
		return a, err
	}
	for _, p := range probes {
		err := do(ctx, c, "probe", func(l *libvirt.Libvirt) error { return p.call(l, probeDomain()) })
		if unsupported(err) {
			a.Lacks = append(a.Lacks, p.what)
		}
	}
	return a, nil
}

// unsupported says libvirt does not serve the call: go-libvirt knows it
// by libvirt's English words, VIR_ERR_NO_SUPPORT says it in any language.
func unsupported(err error) bool {
	var le libvirt.Error
	return errors.Is(err, libvirt.ErrUnsupported) || errors.As(err, &le) && le.Code == uint32(libvirt.ErrNoSupport)
}

// Refusal says why Ferry does not serve the libvirt at socket, nil if it
// does.
func (a Abilities) Refusal(socket string) error {
	if a.Libvirt >= MinLibvirt {
		return nil
	}
	lacks := "nothing a probe finds missing, but it is untested"
	if len(a.Lacks) > 0 {
		lacks = strings.Join(a.Lacks, "; ")
	}
	return fmt.Errorf("%w: libvirt %s at %s is older than %s, the oldest Ferry is tested on and serves; it lacks %s",
		ErrTooOld, VersionString(a.Libvirt), socket, VersionString(MinLibvirt), lacks)
}
