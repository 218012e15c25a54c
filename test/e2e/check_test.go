//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

// checkCase is a guest holding one thing a migration cannot take along,
// what `ferryctl check` must find in its live XML, and where the dry run
// to node b must stop, in the words of whoever refused.
type checkCase struct {
	name, devices, cpu string
	code               string
	severity           api.Severity
	step               string // "" when the dry run passes
	words              string
}

// TestCheckFindsWhatKeepsEachGuestHere starts a guest for each reason a
// guest cannot move that this host's libvirt accepts, and one with none,
// and checks each with `ferryctl check --to b`: the reason read from the
// live XML, and the dry run stopped by the real refusal (this node's
// libvirt at Begin, the target's libvirt or Ferry at Prepare). Whatever
// the dry run ends in, nothing is left on b, and the guest runs on a with
// no migration job, in libvirt and in Ferry.
func TestCheckFindsWhatKeepsEachGuestHere(t *testing.T) {
	// Files only node a's mount namespace holds, in the directory both
	// nodes' ferryds take disks from.
	for _, cmd := range []string{"truncate -s 64M /var/lib/libvirt/images/check-disk.img", "truncate -s 8M /var/lib/libvirt/images/check-only-a.iso",
		"mkdir -p /var/lib/libvirt/images/check-share"} {
		if out, err := bed.Exec(context.Background(), "a", "sh", "-c", cmd).CombinedOutput(); err != nil {
			t.Fatalf("%s on a: %v\n%s", cmd, err, out)
		}
	}
	t.Cleanup(func() {
		bed.Exec(context.Background(), "a", "sh", "-c", "rm -rf /var/lib/libvirt/images/check-*").Run()
	})
	cases := []checkCase{
		{name: "chk-plain"},
		{name: "chk-disk", devices: `<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='/var/lib/libvirt/images/check-disk.img'/><target dev='vda' bus='virtio'/></disk>`,
			code: "local_disk", severity: api.SeverityBlocks, step: api.DryRunBegin, words: "Migration without shared storage is unsafe"},
		{name: "chk-cdrom", devices: `<disk type='file' device='cdrom'><driver name='qemu' type='raw'/><source file='/var/lib/libvirt/images/check-only-a.iso'/><target dev='hdc' bus='ide'/><readonly/></disk>`,
			code: "local_disk", severity: api.SeverityWarns, step: api.DryRunPrepare, words: "Cannot access storage file"},
		{name: "chk-9p", devices: `<filesystem type='mount' accessmode='mapped'><source dir='/var/lib/libvirt/images/check-share'/><target dir='share'/></filesystem>`,
			code: "host_filesystem", severity: api.SeverityBlocks, step: api.DryRunPrepare, words: "host directories are not shared"},
		{name: "chk-shm", devices: `<shmem name='ferry-check'><model type='ivshmem-plain'/><size unit='M'>4</size></shmem>`,
			code: "shared_memory", severity: api.SeverityBlocks, step: api.DryRunBegin, words: "ivshmem"},
		{name: "chk-cpu", cpu: `<cpu mode='maximum' migratable='on'/>`, code: "cpu_host", severity: api.SeverityWarns},
		// This node's libvirt moves it; a Ferry target never takes it,
		// and the check says so before the target does.
		{name: "chk-pinned", cpu: `<cputune><vcpupin vcpu='0' cpuset='0'/></cputune>`,
			code: "ferry_target_refuses", severity: api.SeverityWarns, step: api.DryRunPrepare, words: "<vcpupin>"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			guest(t, testbed.GuestSpec{Name: c.name, MemoryMiB: 128, DirtyMiB: 16, DirtyRateMiBs: -1, Devices: c.devices, CPU: c.cpu})
			r, code := ctlCheck(t, "a", c.name, "--to", bed.Node("b").ProxyAddr, "--to-node", "b")
			t.Logf("%s: migratable %v, blockers %+v, dry run %+v", c.name, r.Migratable, r.Blockers, r.DryRun)
			switch {
			case c.code == "" && len(r.Blockers) > 0:
				t.Errorf("a plain guest has blockers: %+v", r.Blockers)
			case c.code != "" && (len(r.Blockers) != 1 || r.Blockers[0].Code != c.code || r.Blockers[0].Severity != c.severity):
				t.Errorf("blockers %+v, want one %s that %s", r.Blockers, c.code, c.severity)
			}
			d := r.DryRun
			switch {
			case d == nil:
				t.Fatal("no dry run in the answer")
			case c.step == "" && (!d.OK || d.CPU == ""):
				t.Errorf("the dry run did not pass: %+v", d)
			case c.step != "" && (d.OK || d.Step != c.step || !strings.Contains(d.Error, c.words)):
				t.Errorf("dry run %+v, want stopped at %s saying %q", d, c.step, c.words)
			}
			if want := c.step == "" && c.severity != api.SeverityBlocks; r.Migratable != want || (code == 0) != want {
				t.Errorf("migratable %v and exit status %d, want migratable %v", r.Migratable, code, want)
			}
			listedAsMigratable(t, c)
			nothingLeftOfADryRun(t, c.name)
		})
	}
	// Past the tracker's grace for late events, neither ferryd took a dry
	// run for a migration.
	time.Sleep(3 * time.Second)
	for _, c := range cases {
		for _, node := range []string{"a", "b"} {
			if j, ok := ferryOn(node).job(c.name); ok {
				t.Errorf("ferryd on %s recorded a job for the dry run of %s: %s %s", node, c.name, j.Role, j.Phase)
			}
		}
	}
}

// listedAsMigratable: `ferryctl domains` on a says what the check without
// a target says, and names what blocks.
func listedAsMigratable(t *testing.T, c checkCase) {
	t.Helper()
	resp, err := ferryOn("a").domains(true)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(resp.Domains, func(d api.Domain) bool { return d.Name == c.name })
	if i < 0 {
		t.Fatalf("%s is not in a's domain list", c.name)
	}
	d := resp.Domains[i]
	want, blockedBy := c.severity != api.SeverityBlocks, ""
	if !want {
		blockedBy = c.code
	}
	if d.Migratable == nil || *d.Migratable != want || d.BlockedBy != blockedBy {
		t.Errorf("domain list: migratable %v blocked by %q (check error %q), want %v by %q", d.Migratable, d.BlockedBy, d.CheckError, want, blockedBy)
	}
}

// ctlCheck runs `ferryctl check` on node and returns its answer and exit
// status, which is 1 for a guest that cannot move.
func ctlCheck(t *testing.T, node, name string, args ...string) (api.CheckResponse, int) {
	t.Helper()
	full := append([]string{"--socket", bed.Node(node).DebugSocket, "-o", "json", "check", name}, args...)
	out, err := exec.Command(ferryctlBin, full...).Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var r api.CheckResponse
	if err := json.Unmarshal(out, &r); err != nil || code > 1 {
		t.Fatalf("ferryctl check %s: exit %d, %v\n%s", name, code, err, out)
	}
	return r, code
}

// nothingLeftOfADryRun: no guest of that name on b, and the guest runs on
// a with no libvirt job.
func nothingLeftOfADryRun(t *testing.T, name string) {
	t.Helper()
	l, err := bed.Libvirt("b")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	if _, err := l.DomainLookupByName(name); err == nil {
		t.Errorf("a domain %s was left on b", name)
	}
	if st, _ := domainState(t, "a", name); st != int32(libvirt.DomainRunning) {
		t.Errorf("%s is in state %d on a, not running", name, st)
	}
	la, err := bed.Libvirt("a")
	if err != nil {
		t.Fatal(err)
	}
	defer la.Disconnect()
	dom, err := la.DomainLookupByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if typ, _, err := la.DomainGetJobStats(dom, 0); err != nil || typ != int32(libvirt.DomainJobNone) {
		t.Errorf("libvirt on a has a job of type %d on %s after the dry run (%v)", typ, name, err)
	}
}

// TestAMigrationRightAfterADryRunIsSeen migrates a guest the moment its
// dry run has answered: neither node may take the real migration for the
// dry run it follows, and both record it from its start.
func TestAMigrationRightAfterADryRunIsSeen(t *testing.T) {
	guest(t, testbed.GuestSpec{Name: "chk-then", MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8})
	if r, _ := ctlCheck(t, "a", "chk-then", "--to", bed.Node("b").ProxyAddr, "--to-node", "b"); r.DryRun == nil || !r.DryRun.OK {
		t.Fatalf("the dry run did not pass: %+v", r.DryRun)
	}
	start := time.Now()
	if code := ferryctlMigrate(t, "chk-then", "--bandwidth-mibs", "64"); code != 0 {
		t.Fatalf("ferryctl migrate right after the dry run exited %d", code)
	}
	for node, role := range map[string]api.Role{"a": api.RoleSource, "b": api.RoleTarget} {
		j := waitJob(t, node, "chk-then", "the migration recorded", 15*time.Second, func(j api.Job) bool { return j.Phase == api.PhaseCompleted })
		if j.Role != role || j.StartTime.Before(start.Add(-time.Second)) {
			t.Errorf("node %s: job %s %s from %v, want the %s's from the migration's start (%v)", node, j.Role, j.Phase, j.StartTime, role, start)
		}
	}
	assertTruth(t, "chk-then", "a", "b", start)
}
