package daemon

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/metrics"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/migrationtest"
	"github.com/ferry-vm/ferry/migration/policy"
)

const mib = 1 << 20

type applied struct {
	mu    sync.Mutex
	calls []string
}

func (a *applied) record(_ context.Context, j api.Job, d policy.Decision) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, j.ID+" "+string(d.Action))
	return nil
}

func (a *applied) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

func policyDomain(name string, uuid byte) libvirtxtest.Domain {
	return libvirtxtest.Domain{Name: name, UUID: libvirt.UUID{uuid}, ID: int32(uuid), State: int32(libvirtx.StateRunning), Reason: 1}
}

// policyLibvirt is a fake libvirt running d, read by tr's sampler.
func policyLibvirt(t *testing.T, tr *migration.Tracker, d libvirtxtest.Domain) *libvirtxtest.Server {
	f := libvirtxtest.New(t, "")
	f.SetDomains(d)
	migrationtest.Serve(t, tr, f)
	return f
}

// stalledPasses has libvirt report a pre-copy pinned at a 380 MiB working
// set, several readings a pass, and calls consider once the tracker has
// read each, as the Watch stream would.
func stalledPasses(t *testing.T, tr *migration.Tracker, s *steerer, f *libvirtxtest.Server, d libvirtxtest.Domain, passes int) {
	t.Helper()
	elapsed := uint64(0)
	for it := 1; it <= passes; it++ {
		for k := 0; k < 3; k++ {
			left := uint64(380-k*100) * mib
			if it == 1 {
				left = uint64(510-k*100) * mib
			}
			elapsed += 2000
			f.SetJob(d.Name, libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut,
				TimeElapsedMs: elapsed, MemoryIteration: uint64(it), DataTotal: 512 * mib, MemoryTotal: 512 * mib,
				DataRemaining: left, MemoryRemaining: left, MemoryBps: 48 * mib, MemoryDirtyRate: 47 * mib})
			migrationtest.WaitJob(t, tr, f.Path(), d.Name, fmt.Sprintf("at %d ms", elapsed), func(j api.Job) bool { return j.ElapsedMs == elapsed })
			for _, j := range tr.Jobs(false) {
				if j.Domain == d.Name && j.Socket == f.Path() {
					s.consider(context.Background(), j)
				}
			}
		}
	}
}

func newTestSteerer(t *testing.T, node policy.Settings) (*migration.Tracker, *drive.Books, *steerer, *applied) {
	books := drive.NewBooks()
	tr := migration.NewTracker(migration.Config{Node: "n1", SampleInterval: 20 * time.Millisecond, Driver: books})
	books.ShowOn(tr.Books())
	s := newSteerer(tr, node, "n1", zap.NewNop(), metrics.NewPolicyActions(prometheus.NewRegistry()))
	a := &applied{}
	s.apply = a.record
	return tr, books, s, a
}

func TestSteererActsOncePerPassOnTheDrivenJobOnly(t *testing.T) {
	node := policy.Defaults()
	node.Mode = policy.Act
	tr, books, s, a := newTestSteerer(t, node)
	d := policyDomain("ns_vm", 1)
	fa := policyLibvirt(t, tr, d)
	books.Drive(fa.Path(), d.Name, api.ProxyInfo{MigrationID: "m-1"})
	s.driven = func(id string) (drive.Driven, bool) {
		return drive.Driven{Settings: node}, id == "m-1"
	}

	// A namesake on another socket is not driven: advised only.
	twin := policyDomain("ns_vm", 2)
	fb := policyLibvirt(t, tr, twin)

	stalledPasses(t, tr, s, fa, d, 6)
	stalledPasses(t, tr, s, fb, twin, 6)
	if a.count() != 1 {
		t.Fatalf("applied %v, want one abort on the driven job", a.calls)
	}
	var driven, other api.Job
	for _, j := range tr.Jobs(false) {
		if j.Socket == fa.Path() {
			driven = j
		} else {
			other = j
		}
	}
	if a.calls[0] != driven.ID+" abort" {
		t.Fatalf("applied %v, want an abort of %s", a.calls, driven.ID)
	}
	if other.Policy == nil || len(other.Policy.Steps) != 1 || other.Policy.Steps[0].Applied || other.Policy.Mode != "advise" {
		t.Fatalf("namesake's policy record %+v, want one advice", other.Policy)
	}
}

// A migration Ferry drives whose Perform has returned has no owner, and
// nothing steers it: not through the tracker either.
func TestSteererLeavesADrivenMigrationWithoutItsOwnerAlone(t *testing.T) {
	node := policy.Defaults()
	node.Mode = policy.Act
	tr, books, s, a := newTestSteerer(t, node)
	s.driven = func(string) (drive.Driven, bool) { return drive.Driven{}, false }
	d := policyDomain("ns_gone", 4)
	f := policyLibvirt(t, tr, d)
	books.Drive(f.Path(), d.Name, api.ProxyInfo{MigrationID: "m-2"})
	stalledPasses(t, tr, s, f, d, 6)
	if a.count() != 0 {
		t.Fatalf("applied %v to a driven migration with no owner", a.calls)
	}
}

func TestSteererKeepsNoMemoryWhenObservingAndSweepsEndedJobs(t *testing.T) {
	tr, _, s, a := newTestSteerer(t, policy.Defaults())
	d := policyDomain("ns_obs", 3)
	f := policyLibvirt(t, tr, d)
	stalledPasses(t, tr, s, f, d, 5)
	if a.count() != 0 || len(s.mem) != 0 {
		t.Fatalf("observe: applied %v, memory for %d jobs", a.calls, len(s.mem))
	}

	s.node.Mode = policy.Advise
	stalledPasses(t, tr, s, f, d, 6)
	if len(s.mem) != 1 {
		t.Fatalf("advise: memory for %d jobs, want 1", len(s.mem))
	}
	f.SetJob(d.Name, nil)
	f.SetCompletedJob(d.Name, libvirtx.JobStats{Type: libvirtx.JobCancelled, Operation: libvirtx.OperationMigrationOut})
	migrationtest.WaitJob(t, tr, f.Path(), d.Name, "aborted", func(j api.Job) bool { return j.Phase == api.PhaseAborted })
	if len(tr.Jobs(false)) != 0 {
		t.Fatal("the job did not end")
	}
	// The Watch stream coalesces: the end may never reach consider.
	s.sweep()
	if len(s.mem) != 0 || len(s.told) != 0 {
		t.Fatalf("after the job ended: memory for %d jobs, told %d", len(s.mem), len(s.told))
	}
}
