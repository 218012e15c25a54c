package migration

import (
	"errors"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
)

// A pod's socket in the launcher glob lists a domain named like a VM's and
// runs a migration job for it. Requests by name must neither pick one of
// the two at random (map order: 25 of 200 aborts hit the pod's job) nor
// show the pod's job as the VM's: they are refused, naming both sockets.
func TestADomainNameOnTwoSocketsIsRefusedAsAmbiguous(t *testing.T) {
	const vm = "/var/lib/kubelet/pods/aaaa/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock"
	const pod = "/var/lib/kubelet/pods/bbbb/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock"
	f := newFeed(t, "a")
	for _, s := range []string{vm, pod} {
		at := f.tick()
		f.tr.apply(input{kind: inList, socket: s, at: at, got: at, list: []libvirtx.Domain{running(1)}})
		f.tr.apply(input{kind: inStats, socket: s, dom: f.dom, at: f.tick(), got: f.tick(), stats: outgoing(1, 400)})
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), vm) || !strings.Contains(err.Error(), pod) {
			t.Errorf("%s: %v, want a refusal as ambiguous naming both sockets", what, err)
		}
	}
	_, err := f.tr.JobByName("", dom.Name)
	check("job", err)
	if _, ok := f.tr.Job(dom.Name); ok {
		t.Error("Job found one of two same-named domains")
	}
	acts := f.tr.Acts()
	_, err = acts.Abort(JobRef{Domain: dom.Name}, false, AbortByOperator, "")
	check("abort", err)
	_, err = acts.Where(JobRef{Domain: dom.Name}, "abort")
	check("where", err)
	_, _, err = f.tr.DomainRef("", dom.Name)
	check("domain", err)
	_, err = acts.PostCopy(JobRef{Domain: dom.Name}, "by a test")
	check("post-copy", err)
	// recover and give-up may reach either side's state: the name alone
	// must not pick one.
	check("recover or give-up", f.tr.Unambiguous("", dom.Name))
	if err := f.tr.Unambiguous(pod, dom.Name); err != nil {
		t.Errorf("named with its socket: %v", err)
	}
	if j, _ := f.tr.JobByName(vm, dom.Name); j.AbortStatus != "" {
		t.Errorf("an ambiguous abort was recorded: %q", j.AbortStatus)
	}

	// Each job is still its own, on its own socket.
	jobs := f.tr.Jobs(false)
	if len(jobs) != 2 || jobs[0].Socket == jobs[1].Socket {
		t.Errorf("jobs %+v, want one per socket", jobs)
	}

	// Named with its socket, each is found, and only there.
	for _, s := range []string{vm, pod} {
		if j, err := f.tr.JobByName(s, dom.Name); err != nil || j.Socket != s {
			t.Errorf("job on %s: %+v, %v", s, j.Socket, err)
		}
		if on, _, err := f.tr.DomainRef(s, dom.Name); err != nil || on != s {
			t.Errorf("domain on %s: found on %q, %v", s, on, err)
		}
		if on, err := acts.Abort(JobRef{Socket: s, Domain: dom.Name}, false, AbortByOperator, ""); err != nil || on.Socket != s {
			t.Errorf("abort on %s: %v, asked on %+v: want that job's own socket", s, err, on)
		}
	}
	if _, err := f.tr.JobByName("/run/other-sock", dom.Name); !errors.Is(err, ErrNoJob) {
		t.Errorf("job on a socket serving no such domain: %v, want ErrNoJob", err)
	}
}

// A domain found on one socket by other means (the migration Ferry drives
// there) is ambiguous beside a namesake on another libvirt, even one the
// request's socket has not been seen on.
func TestAmbiguousBesideAnotherSocket(t *testing.T) {
	tr := NewTracker(Config{Node: "n1"})
	tr.feedDomains("/pods/x/virtqemud-sock", []libvirtx.Domain{{Ref: libvirt.Domain{Name: "vm"}, Name: "vm", State: libvirtx.StateRunning}}, time.Now())
	if err := tr.AmbiguousBeside("/run/libvirt/libvirt-sock", "vm"); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("a namesake on another socket: %v, want ErrAmbiguous", err)
	}
	if err := tr.AmbiguousBeside("/pods/x/virtqemud-sock", "vm"); err != nil {
		t.Fatalf("the domain on its own socket alone: %v", err)
	}
}
