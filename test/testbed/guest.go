package testbed

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// GuestSpec describes a guest. DirtyRateMiBs 0 dirties as fast as the vCPU
// can, -1 touches DirtyMiB once and then idles.
type GuestSpec struct {
	Name          string
	Node          string
	MemoryMiB     int
	DirtyMiB      int
	DirtyRateMiBs int
	// VMIUID, when set, goes into KubeVirt's domain metadata, as
	// virt-launcher writes it: a mark must match the VMI by it.
	VMIUID string
	// Persistent defines the guest before starting it, as a host's
	// managed VMs are; the default is a transient guest, as KubeVirt's.
	Persistent bool
	// Verify has the guest stamp every page it writes and check all its
	// memory once a second, printing verify=ok or the first bad page
	// (see GuestVerified).
	Verify bool
	// Fill is what the guest writes into a page it dirties: "stamp" (the
	// default: one changing byte, a page that compresses to nothing),
	// "zero" (the page stays a zero page) or "random" (incompressible).
	Fill string
	// Devices is more device XML for the guest's <devices>, and CPU a
	// <cpu> element for it: what a check of migratability looks for.
	Devices, CPU string
}

const (
	maxGuestName = 32
	readyTimeout = 60 * time.Second
)

var guestNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

func checkGuestName(name string) error {
	if name == "" {
		return errors.New("testbed: missing guest name")
	}
	if len(name) > maxGuestName || !guestNameRe.MatchString(name) {
		return fmt.Errorf("testbed: bad guest name %q (up to %d of A-Za-z0-9_.-)", name, maxGuestName)
	}
	return nil
}

// maxDirtyMiB leaves room for the kernel, its memory map and the unpacked
// initramfs; measured: 512 MiB guests OOM at 448 dirtied, 1024 MiB at 896.
func maxDirtyMiB(memoryMiB int) int {
	return memoryMiB - max(96, memoryMiB/8+32)
}

func (g GuestSpec) check() error {
	if err := checkGuestName(g.Name); err != nil {
		return err
	}
	if _, err := lookupNode(g.Node); err != nil {
		return err
	}
	switch {
	case g.MemoryMiB < 128:
		return fmt.Errorf("testbed: guest %s: MemoryMiB %d is below 128", g.Name, g.MemoryMiB)
	case g.DirtyMiB < 0 || g.DirtyMiB > maxDirtyMiB(g.MemoryMiB):
		return fmt.Errorf("testbed: guest %s: DirtyMiB %d must be between 0 and %d for MemoryMiB %d", g.Name, g.DirtyMiB, maxDirtyMiB(g.MemoryMiB), g.MemoryMiB)
	case g.DirtyRateMiBs < -1:
		return fmt.Errorf("testbed: guest %s: DirtyRateMiBs %d (want -1 idle, 0 max, or MiB/s)", g.Name, g.DirtyRateMiBs)
	case g.Fill != "" && g.Fill != "stamp" && g.Fill != "zero" && g.Fill != "random":
		return fmt.Errorf("testbed: guest %s: Fill %q (want stamp, zero or random)", g.Name, g.Fill)
	case g.Verify && g.Fill != "" && g.Fill != "stamp":
		return fmt.Errorf("testbed: guest %s: Verify needs Fill stamp, not %q", g.Name, g.Fill)
	}
	return nil
}

func consolePath(n *Node, guest string) string {
	return filepath.Join(n.Dir, "run", "consoles", "console-"+guest+".log")
}

func (b *Bed) domainXML(g GuestSpec) string {
	return b.guestXML(guestDomain{name: g.Name, memoryMiB: g.MemoryMiB, dirtyMiB: g.DirtyMiB, dirtyRate: g.DirtyRateMiBs,
		kernel: kernelPath(imagesInNode), initrd: initrdPath(imagesInNode), console: consolesInNode + "/console-" + g.Name + ".log", vmiUID: g.VMIUID, verify: g.Verify,
		fill: g.Fill, devices: g.Devices, cpu: g.CPU})
}

// guestDomain is what differs between the bed's guests: a node's and a
// launcher's differ in where their files are and in KubeVirt's metadata.
type guestDomain struct {
	name                           string
	memoryMiB, dirtyMiB, dirtyRate int
	kernel, initrd, console        string
	// vmiUID, when set, is written into KubeVirt's domain metadata.
	vmiUID string
	// verify has the guest check all its memory every second.
	verify bool
	fill   string // GuestSpec.Fill
	// devices and cpu are extra XML (see GuestSpec).
	devices, cpu string
}

func (b *Bed) guestXML(g guestDomain) string {
	domType := "qemu" // libvirt's name for TCG
	if b.Accel() == "kvm" {
		domType = "kvm"
	}
	metadata := ""
	if g.vmiUID != "" {
		metadata = fmt.Sprintf(`
  <metadata>
    <kubevirt xmlns="http://kubevirt.io">
      <uid>%s</uid>
    </kubevirt>
  </metadata>`, g.vmiUID)
	}
	return fmt.Sprintf(`<domain type='%s'>
  <name>%s</name>
  <memory unit='MiB'>%d</memory>
  <vcpu>1</vcpu>%s%s
  <os>
    <type arch='x86_64' machine='%s'>hvm</type>
    <kernel>%s</kernel>
    <initrd>%s</initrd>
    <cmdline>console=ttyS0 panic=-1 quiet dirty.mb=%d dirty.rate=%d dirty.verify=%d dirty.fill=%s</cmdline>
  </os>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <controller type='usb' model='none'/>
    <serial type='file'>
      <source path='%s' append='on'/>
      <target port='0'/>
    </serial>
    <memballoon model='none'/>%s
  </devices>
</domain>
`, domType, g.name, g.memoryMiB, metadata, g.cpu, b.machineType(), g.kernel, g.initrd, g.dirtyMiB, g.dirtyRate, boolInt(g.verify), cmp.Or(g.fill, "stamp"), g.console, g.devices)
}

// StartGuest creates a transient domain and waits until its dirtier has
// touched all its memory.
func (b *Bed) StartGuest(ctx context.Context, g GuestSpec) error {
	if err := g.check(); err != nil {
		return err
	}
	if where, _ := b.findGuest(g.Name); len(where) > 0 {
		return fmt.Errorf("testbed: guest %s already exists on node %s", g.Name, strings.Join(where, ","))
	}
	for _, n := range b.nodes {
		if err := os.Remove(consolePath(n, g.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := writeJSON(guestPath(b.cfg.Dir, g.Name), guestState{Name: g.Name, Segments: []segment{{Node: g.Node}}}); err != nil {
		return err
	}
	l, err := b.Libvirt(g.Node)
	if err != nil {
		return err
	}
	defer l.Disconnect()
	t0 := time.Now()
	var dom libvirt.Domain
	if g.Persistent {
		if dom, err = l.DomainDefineXML(b.domainXML(g)); err == nil {
			err = l.DomainCreate(dom)
		}
	} else {
		dom, err = l.DomainCreateXML(b.domainXML(g), 0)
	}
	if err != nil {
		return fmt.Errorf("testbed: creating guest %s on node %s: %w", g.Name, g.Node, err)
	}
	console := consolePath(b.nodes[g.Node], g.Name)
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for i := 1; ; i++ {
		if out, _ := os.ReadFile(console); bytes.Contains(out, []byte("READY")) {
			logf(b.cfg.Log, "guest %s READY on node %s after %.1fs", g.Name, g.Node, time.Since(t0).Seconds())
			return nil
		}
		// A guest that panics is destroyed (on_crash); no point waiting out the timeout.
		if i%10 == 0 {
			if st, _, err := l.DomainGetState(dom, 0); err != nil || st != int32(libvirt.DomainRunning) {
				return fmt.Errorf("testbed: guest %s on node %s stopped before READY (state %d, %v); console tail:\n%s",
					g.Name, g.Node, st, err, tail(console, 2000))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbed: guest %s on node %s not READY after %.0fs: %w; console tail:\n%s",
				g.Name, g.Node, time.Since(t0).Seconds(), ctx.Err(), tail(console, 2000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// findGuest lists the nodes on which a domain of that name exists.
func (b *Bed) findGuest(name string) ([]string, error) {
	var where []string
	var errs []error
	for _, d := range nodeDefs {
		l, err := b.Libvirt(d.name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := l.DomainLookupByName(name); err == nil {
			where = append(where, d.name)
		}
		l.Disconnect()
	}
	return where, errors.Join(errs...)
}

// DestroyGuest destroys the domain on every node where it exists.
func (b *Bed) DestroyGuest(name string) error {
	if err := checkGuestName(name); err != nil {
		return err
	}
	found := make([]bool, len(nodeDefs))
	errs := make([]error, len(nodeDefs))
	var wg sync.WaitGroup
	for i, d := range nodeDefs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := b.Libvirt(d.name)
			if err != nil {
				errs[i] = err
				return
			}
			defer l.Disconnect()
			if dom, err := l.DomainLookupByName(name); err == nil {
				found[i] = true
				b.killStuckQemu(l, dom, d.name)
				if err := l.DomainDestroy(dom); err != nil && !isNoDomain(err) && !isNotRunning(err) {
					errs[i] = fmt.Errorf("testbed: destroying %s on node %s: %w", name, d.name, err)
				}
				// A persistent guest's definition goes too.
				_ = l.DomainUndefine(dom)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !found[0] && !found[1] {
		return fmt.Errorf("testbed: guest %s does not exist on any node", name)
	}
	return nil
}

func isNoDomain(err error) bool {
	return libvirt.IsNotFound(err)
}

func isNotRunning(err error) bool {
	var lerr libvirt.Error
	return errors.As(err, &lerr) && lerr.Code == uint32(libvirt.ErrOperationInvalid)
}

// killStuckQemu: the target of a failed post-copy has vCPUs blocked on pages
// that will never arrive, so QEMU ignores libvirt's SIGTERM and virDomainDestroy
// waits 10 s before SIGKILL. Tests break post-copy on purpose; skip the wait.
func (b *Bed) killStuckQemu(l *libvirt.Libvirt, dom libvirt.Domain, node string) {
	st, reason, err := l.DomainGetState(dom, 0)
	if err != nil || st != int32(libvirt.DomainRunning) || reason != int32(libvirt.DomainRunningPostcopyFailed) {
		return
	}
	pidfile := filepath.Join(b.nodes[node].Dir, "run", "libvirt", "qemu", dom.Name+".pid")
	if p, ok := pidFileProc(pidfile, "qemu-system", "guest="+dom.Name); ok {
		p.signal(syscall.SIGKILL)
		p.waitGone(5 * time.Second)
	}
}

// GuestVerified reads what the guest's own memory check said on its
// console, on every node it ran: the number of verify=ok lines, and the
// first verify=BAD line ("" if none). A guest started with Verify prints
// one of them every second.
func (b *Bed) GuestVerified(name string) (ok int, bad string, err error) {
	out, err := b.Console(name)
	if err != nil {
		return 0, "", err
	}
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, "verify=ok"):
			ok++
		case bad == "" && strings.Contains(line, "verify=BAD"):
			bad = strings.TrimSpace(line)
		}
	}
	return ok, bad, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
