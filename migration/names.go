package migration

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrAmbiguous refuses a request naming a domain that more than one
// libvirt socket serves. Any pod can serve a socket where the launcher glob
// looks, and list a domain named like another's VM; a request by name must
// not land on whichever the map yields first.
var ErrAmbiguous = errors.New("domain name served by more than one libvirt socket")

// socketsOf lists, sorted, the sockets that list a domain of that name or
// hold an in-flight job for it. t.mu is held.
func (t *Tracker) socketsOf(domain string) []string {
	var out []string
	for socket, doms := range t.domains {
		if _, ok := doms[domain]; ok {
			out = append(out, socket)
		}
	}
	for k := range t.jobs {
		if k.domain == domain && !slices.Contains(out, k.socket) {
			out = append(out, k.socket)
		}
	}
	slices.Sort(out)
	return out
}

// AmbiguousBeside refuses a domain name that a socket other than socket
// serves, naming them all: a request that named no socket and found the
// domain on socket by other means (a migration Ferry drives there) must
// not act on it while another libvirt has a domain of that name.
func (t *Tracker) AmbiguousBeside(socket, domain string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	all := t.socketsOf(domain)
	if !slices.Contains(all, socket) {
		all = append(all, socket)
		slices.Sort(all)
	}
	if len(all) > 1 {
		return fmt.Errorf("%w: %q is on %s on node %s; refused as ambiguous: name the socket (?socket=PATH; ferryctl --libvirt-socket PATH)",
			ErrAmbiguous, domain, strings.Join(all, " and "), t.cfg.Node)
	}
	return nil
}

// Unambiguous refuses a domain name more than one socket serves, naming
// them, unless the request names its socket: for words that may reach
// either side of a migration (recover, give-up), which no one job's
// lookup would weigh together.
func (t *Tracker) Unambiguous(socket, domain string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unambiguous(socket, domain)
}

// unambiguous refuses a domain name more than one socket serves, naming
// them, unless the request names its socket. t.mu is held.
func (t *Tracker) unambiguous(socket, domain string) error {
	if socket != "" {
		return nil
	}
	if s := t.socketsOf(domain); len(s) > 1 {
		return fmt.Errorf("%w: %q is on %s on node %s; refused as ambiguous: name the socket (?socket=PATH; ferryctl --libvirt-socket PATH)",
			ErrAmbiguous, domain, strings.Join(s, " and "), t.cfg.Node)
	}
	return nil
}

// onSocket says whether a job's socket is the one a request names; a
// request naming none takes any (once unambiguous).
func onSocket(want, socket string) bool { return want == "" || want == socket }

// onWhich names where a request looked, for its refusals.
func onWhich(socket string) string {
	if socket == "" {
		return ""
	}
	return fmt.Sprintf(" on %q", socket)
}

// noJobError says there is no job in its own words and is ErrNoJob.
type noJobError string

func (e noJobError) Error() string { return string(e) }
func (e noJobError) Unwrap() error { return ErrNoJob }
