package daemon

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/evacuate"
	"github.com/ferry-vm/ferry/evacuate/evacuatetest"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/measure"
)

// Procedures of remote_protocol.x the launchers below answer beyond the
// fake's own.
const (
	procDomainGetBlockInfo       = 194
	procDomainStartDirtyRateCalc = 427
)

// launcherSocket is a fake launcher's libvirt at the socket path the
// glob of pods matches, running dom with the given number of file disks.
func launcherSocket(t *testing.T, pods string, dom libvirtxtest.Domain, disks int) *libvirtxtest.Server {
	t.Helper()
	dir := filepath.Join(pods, dom.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f := libvirtxtest.New(t, filepath.Join(dir, "virtqemud-sock"))
	f.SetDomains(dom)
	return f
}

// answerGuest serves what a plan asks of a launcher's guest: its XML, a
// dirty-rate measurement of 8 MiB/s, and each disk's size through size.
func answerGuest(dom libvirtxtest.Domain, disks int, size func() ([]byte, *libvirt.Error, bool)) libvirtxtest.AnswerFunc {
	xml := evacuatetest.GuestXML(dom.Name, disks)
	return func(proc uint32, args []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case libvirtxtest.ProcDomainGetXMLDesc:
			return new(libvirtxtest.XDR).String(xml).Bytes(), nil, true
		case procDomainGetBlockInfo:
			return size()
		case procDomainStartDirtyRateCalc:
			return nil, nil, true
		case libvirtxtest.ProcConnectGetAllDomainStats:
			if len(args) >= 4 && binary.BigEndian.Uint32(args) > 0 { // asked of one domain: its dirty rate
				return dirtyRateStats(dom), nil, true
			}
		}
		return nil, nil, false
	}
}

func dirtyRateStats(dom libvirtxtest.Domain) []byte {
	x := new(libvirtxtest.XDR).U32(1).Domain(dom.Name, dom.UUID, dom.ID).U32(4)
	x.Param(libvirt.DomainStatsDirtyrateCalcStatus, int32(libvirt.DomainDirtyrateMeasured))
	x.Param(libvirt.DomainStatsDirtyrateCalcPeriod, int64(1))
	x.Param(libvirt.DomainStatsDirtyrateMegabytesPerSecond, int64(8))
	x.Param(libvirt.DomainStatsDirtyrateCalcMode, string(libvirtx.DirtyRatePageSampling))
	return x.Bytes()
}

// sized answers a disk's size: 10 GiB.
func sized() ([]byte, *libvirt.Error, bool) {
	return new(libvirtxtest.XDR).U64(1 << 30).U64(10 << 30).U64(1 << 30).Bytes(), nil, true
}

// neverSized holds a size call until the test ends, as a pod's libvirt
// that leaves it unanswered does.
func neverSized(t *testing.T) func() ([]byte, *libvirt.Error, bool) {
	over := make(chan struct{})
	t.Cleanup(func() { close(over) })
	return func() ([]byte, *libvirt.Error, bool) {
		<-over
		return nil, &libvirt.Error{Code: uint32(libvirt.ErrInternalError), Message: "too late"}, true
	}
}

// One pod whose 30 disks' sizes are never answered is reported as not
// measured, naming it and what it left unanswered; the node's other guest
// is planned as ever, and the plan and the evacuation answer in time. Here
// through the routes and the pool, over launchers' libvirt: evacuate/'s
// own test plans the same node over fakes.
func TestAPodThatNeverAnswersSizesIsNotMeasuredAndTheRestIsPlanned(t *testing.T) {
	const hostileDisks = 30
	pods := filepath.Join(t.TempDir(), "pods")
	normal := libvirtxtest.Domain{Name: "default_normal", UUID: libvirt.UUID{1}, ID: 1, State: int32(libvirtx.StateRunning), Reason: 1}
	hostile := libvirtxtest.Domain{Name: "default_hostile", UUID: libvirt.UUID{2}, ID: 1, State: int32(libvirtx.StateRunning), Reason: 1}
	fn := launcherSocket(t, pods, normal, 1)
	fn.Answer(answerGuest(normal, 1, sized))
	fh := launcherSocket(t, pods, hostile, hostileDisks)
	fh.Answer(answerGuest(hostile, hostileDisks, neverSized(t)))

	d, hc := startDaemonWith(t, func(c *Config) {
		c.LibvirtSockets, c.LibvirtGlob = nil, filepath.Join(pods, "*", "virtqemud-sock")
		c.CallTimeout = 2 * time.Second
		c.DirtyRate = measure.Config{Period: time.Hour, Sample: time.Second, Concurrent: 4}
		c.Peers = map[string]string{"n2": "127.0.0.1:1"}
	})
	waitDomains(t, d, 2)

	// Asked one after the other, the 30 sizes alone would take a minute.
	const bound = 20 * time.Second
	start := time.Now()
	var p api.Plan
	if code := askPlan(t, hc, bound, http.MethodGet, "/v1/plan", nil, &p); code != http.StatusOK {
		t.Fatalf("GET /v1/plan: %d after %v", code, time.Since(start))
	}
	if took := time.Since(start); took > bound {
		t.Fatalf("the plan took %v", took)
	}
	evacuatetest.CheckHostilePlan(t, p.Entries, normal.Name, hostile.Name)
	if n := len(fh.Calls(procDomainGetBlockInfo)); n > evacuate.SizesAtOnce {
		t.Errorf("the hostile domain was asked %d sizes; once one went unanswered, no more than the %d under way at once should be", n, evacuate.SizesAtOnce)
	}

	// Whatever the pool made of the calls left hanging, the evacuation
	// plans what the tracker lists.
	waitDomains(t, d, 2)
	var ev api.Evacuation
	body := strings.NewReader(`{"targets":["n2"],"dryRun":true}`)
	if code := askPlan(t, hc, bound, http.MethodPost, "/v1/evacuations", body, &ev); code != http.StatusAccepted {
		t.Fatalf("POST /v1/evacuations: %d", code)
	}
	evacuatetest.CheckHostilePlan(t, ev.Entries, normal.Name, hostile.Name)
}

// waitDomains waits for the tracker to list n running domains.
func waitDomains(t *testing.T, d *Daemon, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(d.Tracker.Domains()) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the tracker lists %d domains, want %d", len(d.Tracker.Domains()), n)
		}
	}
}

// askPlan makes a request that must be answered within bound, and decodes
// a success into out.
func askPlan(t *testing.T, hc *http.Client, bound time.Duration, method, path string, body io.Reader, out any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://ferryd"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var e api.ErrorResponse
		json.NewDecoder(resp.Body).Decode(&e)
		t.Logf("%s %s: %s", method, path, e.Error)
		return resp.StatusCode
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode
}
