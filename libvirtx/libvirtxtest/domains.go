package libvirtxtest

import (
	"fmt"
	"sort"

	libvirt "github.com/digitalocean/go-libvirt"
)

// Domain is a domain as libvirt lists it. State and Reason are libvirt's
// numbers (virDomainState and its reasons); a shut-off domain is defined
// but not active.
type Domain struct {
	Name   string
	UUID   libvirt.UUID
	ID     int32
	State  int32
	Reason int32
}

// defaultMaxDowntimeMs is libvirt's own default for a migration's final
// stop-and-copy.
const defaultMaxDowntimeMs = 300

type domain struct {
	Domain
	// job and completed are the current and the last completed job's
	// statistics; nil is none.
	job, completed *job
	maxDowntimeMs  uint64
}

func (d *domain) active() bool { return d.State != int32(libvirt.DomainShutoff) }

// SetDomains makes ds the domains, in place of all others (a domain that
// stays keeps its jobs).
func (s *Server) SetDomains(ds ...Domain) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := map[string]bool{}
	for _, d := range ds {
		s.setDomain(d)
		keep[d.Name] = true
	}
	for name := range s.domains {
		if !keep[name] {
			delete(s.domains, name)
		}
	}
}

// SetDomain adds d, or changes the domain of its name (keeping its jobs).
func (s *Server) SetDomain(d Domain) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setDomain(d)
}

func (s *Server) setDomain(d Domain) {
	s.known[d.Name] = d
	if old := s.domains[d.Name]; old != nil {
		old.Domain = d
		return
	}
	s.domains[d.Name] = &domain{Domain: d, maxDowntimeMs: defaultMaxDowntimeMs}
}

// SetState changes a domain's state and reason.
func (s *Server) SetState(name string, state, reason int32) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.mustDomain(name)
	d.State, d.Reason = state, reason
	s.known[name] = d.Domain
}

// RemoveDomain makes a domain gone, as a transient domain is once it
// stops: every call naming it fails with VIR_ERR_NO_DOMAIN.
func (s *Server) RemoveDomain(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.domains, name)
}

// SetJob sets the statistics of a domain's current job: a struct of
// figures (see jobstats.go), a libvirt.Error for the call to fail with,
// or nil for no job.
func (s *Server) SetJob(name string, stats any) {
	s.t.Helper()
	s.setJob(name, stats, false)
}

// SetCompletedJob sets the statistics libvirt keeps of a domain's last
// completed job, as SetJob does those of its current one.
func (s *Server) SetCompletedJob(name string, stats any) {
	s.t.Helper()
	s.setJob(name, stats, true)
}

func (s *Server) setJob(name string, stats any, completed bool) {
	s.t.Helper()
	j, err := newJob(stats)
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.mustDomain(name)
	if completed {
		d.completed = j
	} else {
		d.job = j
	}
}

// mustDomain is the domain of that name; the caller holds s.mu.
func (s *Server) mustDomain(name string) *domain {
	s.t.Helper()
	d := s.domains[name]
	if d == nil {
		s.t.Fatalf("libvirtxtest: no domain %q", name)
	}
	return d
}

// listed is what a listing of the domains shows, by name.
func (s *Server) listed(activeOnly bool) []Domain {
	var out []Domain
	for _, d := range s.domains {
		if d.active() || !activeOnly {
			out = append(out, d.Domain)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func noDomain(name string) *libvirt.Error {
	return &libvirt.Error{Code: uint32(libvirt.ErrNoDomain), Message: fmt.Sprintf("Domain not found: no domain with matching name '%s'", name)}
}

func invalid(why string) *libvirt.Error {
	return &libvirt.Error{Code: uint32(libvirt.ErrOperationInvalid), Message: "Requested operation is not valid: " + why}
}
