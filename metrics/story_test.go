package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/migrationtest"
	"github.com/ferry-vm/ferry/proxy"
)

// story is testdata/story.json: one node's recorded day (see its "about").
type story struct {
	About          string                  `json:"about"`
	Node           string                  `json:"node"`
	Version        string                  `json:"version"`
	Sockets        []libvirtx.SocketStatus `json:"sockets"`
	Glob           *libvirtx.GlobStatus    `json:"glob"`
	VMIs           map[string]api.VMIInfo  `json:"vmis"`
	MarksPending   int                     `json:"marksPending"`
	MarksDelivered map[string]int          `json:"marksDelivered"`
	Steps          []storyStep             `json:"steps"`
}

// storyStep is one thing that happened. Those libvirt said name a socket,
// and a domain unless they are a listing or the socket's loss.
type storyStep struct {
	Comment string       `json:"comment,omitempty"`
	At      time.Time    `json:"at"`
	Socket  string       `json:"socket,omitempty"`
	Domain  *storyDomain `json:"domain,omitempty"`

	// What libvirt said: a job's statistics; the completed job's, read
	// after its job went away (with the domain's state then), or kept
	// once an event's job ended; a lifecycle
	// event (event/detail as virsh names them); a migration-iteration
	// event; a listing of the socket's domains; the socket's loss ("gone":
	// removed, for good; else the error of a lost connection).
	Stats     *libvirtx.JobStats `json:"stats,omitempty"`
	Ended     *libvirtx.JobStats `json:"ended,omitempty"`
	Event     string             `json:"event,omitempty"`
	Iteration int32              `json:"iteration,omitempty"`
	Domains   []storyDomain      `json:"domains,omitempty"`
	Lost      string             `json:"lost,omitempty"`

	// What ferryd's driver says of a migration it drives.
	Drive           *api.ProxyInfo `json:"drive,omitempty"`
	Recoverable     string         `json:"recoverable,omitempty"`
	RecoveryAttempt *struct {
		Attempt int    `json:"attempt"`
		Error   string `json:"error"`
	} `json:"recoveryAttempt,omitempty"`
	Resumed *struct {
		Attempt int    `json:"attempt"`
		Took    string `json:"took"`
	} `json:"resumed,omitempty"`

	// A decision of the convergence policy on the domain's job.
	Policy *storyPolicy `json:"policy,omitempty"`

	// The proxy: a refusal by reason, bytes relayed, a connection set up.
	Rejected string `json:"rejected,omitempty"`
	Relayed  *struct {
		Stream    string `json:"stream"`
		Direction string `json:"direction"`
		Bytes     uint64 `json:"bytes"`
	} `json:"relayed,omitempty"`
	Dialed *struct {
		Leg     string  `json:"leg"`
		Seconds float64 `json:"seconds"`
	} `json:"dialed,omitempty"`
}

type storyDomain struct {
	Name string `json:"name"`
	ID   int32  `json:"id"`
	// State is state/reason as virsh names them, "running/booted".
	State string `json:"state,omitempty"`
}

type storyPolicy struct {
	Mode string `json:"mode"`
	api.PolicyStep
}

func loadStory(t *testing.T, path string) story {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s story
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

// fake is a story's domain as libvirt lists it; its UUID is made from its
// ID.
func (d storyDomain) fake(t *testing.T) libvirtxtest.Domain {
	t.Helper()
	dom := libvirtxtest.Domain{Name: d.Name, ID: d.ID, UUID: libvirt.UUID{0xf0, byte(d.ID)}}
	if d.State != "" {
		st, reason := stateNamed(t, d.State)
		dom.State, dom.Reason = int32(st), reason
	}
	return dom
}

// stateNamed finds libvirt's state and reason codes from virsh's names.
func stateNamed(t *testing.T, name string) (libvirtx.State, int32) {
	t.Helper()
	for s := libvirtx.StateNoState; s <= libvirtx.StatePMSuspended; s++ {
		for r := int32(0); r < 32; r++ {
			if s.String()+"/"+libvirtx.ReasonName(s, r) == name {
				return s, r
			}
		}
	}
	t.Fatalf("no libvirt state %q", name)
	return 0, 0
}

// eventNamed finds a lifecycle event's codes from virsh's names.
func eventNamed(t *testing.T, name string) (event, detail int32) {
	t.Helper()
	for e := int32(0); e < 16; e++ {
		for d := int32(0); d < 16; d++ {
			if libvirtx.EventName(e, d) == name {
				return e, d
			}
		}
	}
	t.Fatalf("no libvirt event %q", name)
	return 0, 0
}

// storyLibvirt is a fake libvirt for each of the story's sockets, laid out
// under root, each read by the tracker's own sampler.
type storyLibvirt struct {
	t     *testing.T
	tr    *migration.Tracker
	root  string
	fakes map[string]*libvirtxtest.Server
	feeds map[string]*migrationtest.Feed
}

// on is the fake serving socket, started and connected at its first use.
func (l *storyLibvirt) on(socket string) *libvirtxtest.Server {
	if f := l.fakes[socket]; f != nil {
		return f
	}
	path := l.root + socket
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		l.t.Fatal(err)
	}
	f := libvirtxtest.New(l.t, path)
	l.fakes[socket] = f
	l.feeds[socket] = migrationtest.Serve(l.t, l.tr, f)
	return f
}

// waitJob waits for the tracker to show a step about a domain's job.
func (l *storyLibvirt) waitJob(where string, st storyStep, what string, ok func(api.Job) bool) {
	l.t.Helper()
	migrationtest.WaitJob(l.t, l.tr, l.root+st.Socket, st.Domain.Name, what+" ("+where+")", ok)
}

// said serves what libvirt said in a step, and waits for the tracker to
// show it. A domain's state, when a step names it, is what libvirt lists
// from then on; an event's is the state it leaves, set before the event
// is sent, as libvirt has changed it by the time its event is read.
func (l *storyLibvirt) said(where string, st storyStep) {
	t := l.t
	t.Helper()
	f := l.on(st.Socket)
	var name string
	if st.Domain != nil {
		name = st.Domain.Name
		if st.Domain.State != "" {
			f.SetDomain(st.Domain.fake(t))
		}
	}
	switch {
	case st.Stats != nil:
		if !st.Stats.Type.Active() || st.Stats.Operation != libvirtx.OperationMigrationOut {
			t.Fatalf("%s: the replay knows how to wait for an outgoing migration's statistics only", where)
		}
		f.SetJob(name, *st.Stats)
		l.waitJob(where, st, fmt.Sprintf("at %d ms", st.Stats.TimeElapsedMs), func(j api.Job) bool {
			return j.ElapsedMs == st.Stats.TimeElapsedMs && (st.Domain.State == "" || j.DomainState == st.Domain.State)
		})
	case st.Ended != nil && st.Event == "":
		f.SetJob(name, nil)
		f.SetCompletedJob(name, *st.Ended)
		l.waitJob(where, st, "ended", func(j api.Job) bool { return j.Phase.Finished() })
	case st.Event != "":
		e, d := eventNamed(t, st.Event)
		if st.Domain.State == "" {
			t.Fatalf("%s: an event step names the state the event leaves", where)
		}
		if e == libvirtx.EventStarted && d == libvirtx.StartedMigrated {
			// The incoming side: libvirt's QEMU driver gives no statistics there.
			f.SetJob(name, libvirt.Error{Code: uint32(libvirt.ErrOperationUnsupported), Message: "migration statistics are available only on the source host"})
		}
		if st.Ended != nil {
			// libvirt keeps them before it stops the domain and says so.
			f.SetCompletedJob(name, *st.Ended)
		}
		f.Lifecycle(name, e, d)
		l.waitJob(where, st, st.Domain.State, func(j api.Job) bool {
			return j.DomainState == st.Domain.State && (st.Ended == nil || j.DowntimeMs == st.Ended.DowntimeMs)
		})
	case st.Iteration != 0:
		f.Iteration(name, st.Iteration)
		l.waitJob(where, st, fmt.Sprintf("in pass %d", st.Iteration), func(j api.Job) bool { return j.Iteration >= uint64(st.Iteration) })
	case st.Domains != nil:
		var doms []libvirtxtest.Domain
		for _, d := range st.Domains {
			doms = append(doms, d.fake(t))
		}
		f.SetDomains(doms...)
		migrationtest.Wait(t, where+": the listing", func() bool {
			shown := map[string]string{}
			for _, d := range l.tr.Domains() {
				if d.Socket == f.Path() {
					shown[d.Name] = d.State + "/" + d.Reason
				}
			}
			for _, d := range st.Domains {
				if shown[d.Name] != d.State {
					return false
				}
			}
			return true
		})
	case st.Lost != "":
		// As the pool does: the connection ends, then the tracker hears why;
		// a removed socket is gone for good, another comes back.
		l.feeds[st.Socket].Stop()
		if st.Lost == "gone" {
			f.Close()
			l.tr.Lost(f.Path(), libvirtx.ErrSocketGone)
			return
		}
		l.tr.Lost(f.Path(), errors.New(st.Lost))
		l.feeds[st.Socket] = migrationtest.Serve(t, l.tr, f)
	}
}

// replay feeds the story's steps to tr: what libvirt said through a fake
// libvirt per socket (laid out under root) that tr's sampler reads; what
// the driver and the steerer say straight to tr, as they do; the proxy's
// to p and its vectors.
func (s story) replay(t *testing.T, tr *migration.Tracker, books *drive.Books, root string, count func(p storyPolicy), p *proxy.Proxy, pm Proxy) {
	t.Helper()
	l := &storyLibvirt{t: t, tr: tr, root: root, fakes: map[string]*libvirtxtest.Server{}, feeds: map[string]*migrationtest.Feed{}}
	for i, st := range s.Steps {
		where := fmt.Sprintf("step %d (%s)", i, st.At.Format(time.TimeOnly))
		needDomain := func() {
			if st.Domain == nil || st.Socket == "" {
				t.Fatalf("%s: a socket and a domain are needed", where)
			}
		}
		switch {
		case st.Stats != nil, st.Ended != nil, st.Event != "", st.Iteration != 0:
			needDomain()
			l.said(where, st)
		case st.Domains != nil, st.Lost != "":
			l.said(where, st)
		case st.Drive != nil:
			needDomain()
			books.Drive(l.root+st.Socket, st.Domain.Name, *st.Drive)
		case st.Recoverable != "":
			needDomain()
			d, err := time.ParseDuration(st.Recoverable)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			books.DriveRecoverable(l.root+st.Socket, st.Domain.Name, d)
		case st.RecoveryAttempt != nil:
			needDomain()
			books.DriveRecoveryAttempt(l.root+st.Socket, st.Domain.Name, st.RecoveryAttempt.Attempt, errors.New(st.RecoveryAttempt.Error))
		case st.Resumed != nil:
			needDomain()
			took, err := time.ParseDuration(st.Resumed.Took)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			books.DriveResumed(l.root+st.Socket, st.Domain.Name, st.Resumed.Attempt, took)
		case st.Policy != nil:
			needDomain()
			j, err := tr.JobByName(l.root+st.Socket, st.Domain.Name)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			step := st.Policy.PolicyStep
			step.Time = st.At
			tr.Acts().RecordPolicy(j.ID, st.Policy.Mode, step)
			count(*st.Policy)
		case st.Rejected != "":
			pm.Rejected.WithLabelValues(st.Rejected).Inc()
		case st.Relayed != nil:
			pm.Bytes.WithLabelValues(st.Relayed.Stream, st.Relayed.Direction).Add(float64(st.Relayed.Bytes))
		case st.Dialed != nil:
			pm.DialDuration.WithLabelValues(st.Dialed.Leg).Observe(st.Dialed.Seconds)
		default:
			t.Fatalf("%s: nothing happens", where)
		}
	}
}

// fixedSockets are the story's libvirt sockets as the pool would show them.
type fixedSockets story

func (s fixedSockets) Status() []libvirtx.SocketStatus { return s.Sockets }
func (s fixedSockets) GlobStatus() (libvirtx.GlobStatus, bool) {
	if s.Glob == nil {
		return libvirtx.GlobStatus{}, false
	}
	return *s.Glob, true
}
