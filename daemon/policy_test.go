package daemon

import (
	"context"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/policy"
)

const mib = 1 << 20

type applied struct {
	mu    sync.Mutex
	calls []string
}

func (a *applied) record(_ context.Context, id string, act policy.Actuator, d policy.Decision) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	via := "tracker"
	if act != nil {
		via = "owner"
	}
	a.calls = append(a.calls, id+" "+string(d.Action)+" via "+via)
	return nil
}

// ownerStandIn marks the actuator a driven migration's owner would be.
type ownerStandIn struct{ policy.Actuator }

func (a *applied) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

func policyDomain(name string, uuid byte) libvirtx.Domain {
	return libvirtx.Domain{Ref: libvirt.Domain{Name: name, UUID: libvirt.UUID{uuid}}, Name: name,
		State: libvirtx.StateRunning, Reason: 1}
}

// stalledPasses feeds a pre-copy pinned at a 380 MiB working set, several
// readings a pass, calling consider after each as the Watch stream would.
func stalledPasses(tr *migration.Tracker, s *steerer, socket string, d libvirtx.Domain, passes int) {
	at := time.Now().Add(-time.Hour)
	elapsed := uint64(0)
	for it := 1; it <= passes; it++ {
		for k := 0; k < 3; k++ {
			left := uint64(380-k*100) * mib
			if it == 1 {
				left = uint64(510-k*100) * mib
			}
			elapsed += 2000
			at = at.Add(2 * time.Second)
			tr.ApplyStats(socket, d, libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut,
				TimeElapsedMs: elapsed, MemoryIteration: uint64(it), DataTotal: 512 * mib, MemoryTotal: 512 * mib,
				DataRemaining: left, MemoryRemaining: left, MemoryBps: 48 * mib, MemoryDirtyRate: 47 * mib}, at)
			for _, j := range tr.Jobs(false) {
				if j.Domain == d.Name && j.Socket == socket {
					s.consider(context.Background(), j)
				}
			}
		}
	}
}

func newTestSteerer(t *testing.T, node policy.Settings) (*migration.Tracker, *steerer, *applied) {
	tr := migration.NewTracker(migration.Config{Node: "n1"})
	s := newSteerer(tr, node, "n1", zap.NewNop(), prometheus.NewRegistry())
	a := &applied{}
	s.apply = a.record
	return tr, s, a
}

func TestSteererActsOncePerPassOnTheDrivenJobOnly(t *testing.T) {
	node := policy.Defaults()
	node.Mode = policy.Act
	tr, s, a := newTestSteerer(t, node)
	d := policyDomain("ns_vm", 1)
	tr.ApplyDomains("/run/a.sock", []libvirtx.Domain{d}, time.Now())
	tr.Drive("/run/a.sock", d.Name, migration.ProxyInfo{MigrationID: "m-1"})
	s.driven = func(id string) (drive.Driven, bool) {
		return drive.Driven{Settings: node, Act: ownerStandIn{}}, id == "m-1"
	}

	// A namesake on another socket is not driven: advised only.
	twin := policyDomain("ns_vm", 2)
	tr.ApplyDomains("/run/b.sock", []libvirtx.Domain{twin}, time.Now())

	stalledPasses(tr, s, "/run/a.sock", d, 6)
	stalledPasses(tr, s, "/run/b.sock", twin, 6)
	if a.count() != 1 {
		t.Fatalf("applied %v, want one abort on the driven job", a.calls)
	}
	var driven, other migration.Job
	for _, j := range tr.Jobs(false) {
		if j.Socket == "/run/a.sock" {
			driven = j
		} else {
			other = j
		}
	}
	if a.calls[0] != driven.ID+" abort via owner" {
		t.Fatalf("applied %v, want an abort of %s through its owner", a.calls, driven.ID)
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
	tr, s, a := newTestSteerer(t, node)
	s.driven = func(string) (drive.Driven, bool) { return drive.Driven{}, false }
	d := policyDomain("ns_gone", 4)
	tr.ApplyDomains("/run/a.sock", []libvirtx.Domain{d}, time.Now())
	tr.Drive("/run/a.sock", d.Name, migration.ProxyInfo{MigrationID: "m-2"})
	stalledPasses(tr, s, "/run/a.sock", d, 6)
	if a.count() != 0 {
		t.Fatalf("applied %v to a driven migration with no owner", a.calls)
	}
}

func TestSteererKeepsNoMemoryWhenObservingAndSweepsEndedJobs(t *testing.T) {
	tr, s, a := newTestSteerer(t, policy.Defaults())
	d := policyDomain("ns_obs", 3)
	tr.ApplyDomains("/run/a.sock", []libvirtx.Domain{d}, time.Now())
	stalledPasses(tr, s, "/run/a.sock", d, 5)
	if a.count() != 0 || len(s.mem) != 0 {
		t.Fatalf("observe: applied %v, memory for %d jobs", a.calls, len(s.mem))
	}

	s.node.Mode = policy.Advise
	stalledPasses(tr, s, "/run/a.sock", d, 6)
	if len(s.mem) != 1 {
		t.Fatalf("advise: memory for %d jobs, want 1", len(s.mem))
	}
	tr.ApplyEnded("/run/a.sock", d, libvirtx.JobStats{Type: libvirtx.JobCancelled, Operation: libvirtx.OperationMigrationOut}, time.Now())
	if len(tr.Jobs(false)) != 0 {
		t.Fatal("the job did not end")
	}
	// The Watch stream coalesces: the end may never reach consider.
	s.sweep()
	if len(s.mem) != 0 || len(s.told) != 0 {
		t.Fatalf("after the job ended: memory for %d jobs, told %d", len(s.mem), len(s.told))
	}
}
