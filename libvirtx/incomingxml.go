package libvirtx

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"libvirt.org/go/libvirtxml"
)

// The domain XML of an incoming migration comes from a peer, and the
// target's libvirt acts on it as root: it opens, creates, relabels and
// chowns the files it names (dynamic_ownership), runs the emulator and
// scripts it names, passes host devices and raw QEMU arguments. So
// CheckIncomingXML accepts only a domain that stays inside what a
// migration needs: every local path under an allowed prefix, no host
// devices, no scripts or helper binaries, no QEMU pass-through, no security
// label chosen by the peer.

const qemuNamespace = "http://libvirt.org/schemas/domain/qemu/1.0"

// xmlChecks bounds the peers' XML checks running at once on the node,
// however many peers send them: each costs CPU and, at the caps below,
// tens of MiB.
var xmlChecks = make(chan struct{}, 2)

// maxDomainTags and maxDomainAttrs bound the work a peer's XML can cost:
// the parser allocates some 1.5 KiB per attribute, so 2 MiB of them cost
// 350 MiB. A real domain has a few hundred of each, a large one a few
// thousand.
const (
	maxDomainTags  = 20000
	maxDomainAttrs = 10000
)

// maxDomainDepth and maxXMLName bound how deep a peer's XML nests and how
// long its names are: a domain nests some ten deep (KubeVirt's metadata
// a few more), and libvirt's names are short words. Work that follows
// an element's path costs its depth, so thousands of nested tags under
// the tag cap would cost their square.
const (
	maxDomainDepth = 64
	maxXMLName     = 128
)

// emulatorPath matches the QEMU binaries distributions install; the
// emulator is run as is, so a peer cannot name any other program.
var emulatorPath = regexp.MustCompile(`^/usr/(bin|libexec)/(qemu-system-[a-z0-9_]+|qemu-kvm)$`)

// rngDevices are the host entropy sources an RNG backend may read.
var rngDevices = []string{"/dev/urandom", "/dev/random", "/dev/hwrng"}

// firmwareDirs are where distributions install guest firmware: root's,
// read by every guest, written by none. A read-only loader comes from
// here or an allowed path, an NVRAM template (libvirt copies it into the
// guest's NVRAM) only from here, and a writable loader never: QEMU writes
// it, so it is the guest's own file, in an allowed path.
var firmwareDirs = []string{"/usr/share/OVMF", "/usr/share/AAVMF", "/usr/share/edk2", "/usr/share/qemu", "/usr/share/seabios"}

// XMLRefusal says why a domain XML was refused, naming the element.
type XMLRefusal struct{ Msg string }

func (e *XMLRefusal) Error() string { return "domain XML refused: " + e.Msg }

func refuse(format string, a ...any) error { return &XMLRefusal{Msg: fmt.Sprintf(format, a...)} }

// CheckIncomingXML checks the domain XML of an incoming migration of the
// domain name against what the node allows.
func CheckIncomingXML(domXML, name string, pol IncomingPolicy) error {
	_, err := CanonicalIncomingXML(domXML, name, pol)
	return err
}

// CanonicalIncomingXML checks the domain XML of an incoming migration and
// returns the XML to give libvirt: the checked domain marshalled again,
// never the peer's bytes. Go's parser and libvirt's may read the same
// bytes differently (of a repeated element, Go keeps the last and libvirt
// the first); the re-marshalled XML holds only what was checked.
func CanonicalIncomingXML(domXML, name string, pol IncomingPolicy) (string, error) {
	xmlChecks <- struct{}{}
	defer func() { <-xmlChecks }()
	// Parsing and sweeping cost time per element: 2 MiB of <rng/> took
	// 1.5 s of CPU. A real domain has a few hundred.
	if n := strings.Count(domXML, "<"); n > maxDomainTags {
		return "", refuse("it has %d tags, more than any domain's %d", n, maxDomainTags)
	}
	// Every attribute has its '=', and text seldom has many.
	if n := strings.Count(domXML, "="); n > maxDomainAttrs {
		return "", refuse("it has %d attributes, more than any domain's %d", n, maxDomainAttrs)
	}
	if err := boundedNesting(domXML); err != nil {
		return "", err
	}
	d, err := checkIncomingXML(domXML, name, pol)
	if err != nil {
		return "", err
	}
	canon, err := d.Marshal()
	if err != nil {
		return "", refuse("it does not marshal again: %v", err)
	}
	// What libvirtxml writes back must pass the same sweep, and lose
	// nothing the peer sent.
	if err := sweepXML(canon, pol); err != nil {
		return "", err
	}
	if err := lostInRemarshal(domXML, canon); err != nil {
		return "", err
	}
	return canon, nil
}

func checkIncomingXML(domXML, name string, pol IncomingPolicy) (*libvirtxml.Domain, error) {
	d, err := checkDomain(domXML, name, pol)
	if err != nil {
		return nil, err
	}
	if err := checkSizes(d, pol); err != nil {
		return nil, err
	}
	if err := checkBackingChains(d); err != nil {
		return nil, err
	}
	// The typed checks name what they refuse best; the sweep catches what
	// they do not know, and allows only what is listed.
	if err := sweepXML(domXML, pol); err != nil {
		return nil, err
	}
	return d, nil
}

func checkDomain(domXML, name string, pol IncomingPolicy) (*libvirtxml.Domain, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(domXML); err != nil {
		return nil, refuse("it does not parse: %v", err)
	}
	if d.Name != name {
		return nil, refuse("<name> is %q, not the domain being migrated, %q", d.Name, name)
	}
	for el, set := range map[string]bool{"commandline": d.QEMUCommandline != nil, "capabilities": d.QEMUCapabilities != nil,
		"override": d.QEMUOverride != nil, "deprecation": d.QEMUDeprecation != nil} {
		if set {
			return nil, refuse("<qemu:%s>: QEMU pass-through is not accepted", el)
		}
	}
	for _, s := range d.SecLabel {
		// type='none' model='none' only says the source host has no
		// security driver; any other 'none' asks for an unconfined QEMU.
		if s.Type == "static" || (s.Type == "none" && s.Model != "none") {
			return nil, refuse("<seclabel type='%s' model='%s'>: the target chooses its QEMU's security label", s.Type, s.Model)
		}
	}
	if strings.HasPrefix(d.OnCrash, "coredump") {
		return nil, refuse("<on_crash>%s</on_crash>: a guest's memory is not dumped to the target's disk at a peer's word", d.OnCrash)
	}
	pc := pathCheck{allowed: pol.AllowedPaths, consoles: pol.ConsoleDirs}
	if os := d.OS; os != nil {
		pc.file("<os><kernel>", os.Kernel)
		pc.file("<os><initrd>", os.Initrd)
		pc.file("<os><dtb>", os.DTB)
		pc.file("<os><shim>", os.Shim)
		if l := os.Loader; l != nil {
			if l.Readonly == "yes" || l.Type == "rom" || l.Path == "" {
				pc.firmware("<os><loader>", l.Path, true)
			} else {
				// QEMU writes a writable pflash, and libvirt hands it to
				// QEMU's user: a guest's own file, never the firmware
				// every guest boots from.
				pc.file("<os><loader readonly='no'>", l.Path)
			}
		}
		if os.NVRam != nil {
			pc.file("<os><nvram>", os.NVRam.NVRam)
			pc.firmware("<os><nvram template>", os.NVRam.Template, false)
			pc.diskSource("<os><nvram><source>", os.NVRam.Source)
		}
		if os.ACPI != nil {
			for _, t := range os.ACPI.Tables {
				pc.file("<os><acpi><table>", t.Path)
			}
		}
	}
	if devs := d.Devices; devs != nil {
		checkDevices(&pc, devs)
	}
	if pc.err != nil {
		return nil, pc.err
	}
	return &d, nil
}

func checkDevices(pc *pathCheck, devs *libvirtxml.DomainDeviceList) {
	if devs.Emulator != "" && !emulatorPath.MatchString(devs.Emulator) {
		pc.fail(refuse("<emulator> %q is not a QEMU binary in /usr/bin or /usr/libexec", devs.Emulator))
	}
	if len(devs.Hostdevs) > 0 {
		pc.fail(refuse("<hostdev>: host devices are not passed through an incoming migration"))
	}
	for _, disk := range devs.Disks {
		what := "<disk>"
		if disk.Target != nil {
			what = fmt.Sprintf("<disk> %s", disk.Target.Dev)
		}
		pc.diskSource(what+" <source>", disk.Source)
		for bs := disk.BackingStore; bs != nil; bs = bs.BackingStore {
			pc.diskSource(what+" <backingStore><source>", bs.Source)
		}
		if disk.Mirror != nil {
			pc.diskSource(what+" <mirror><source>", disk.Mirror.Source)
		}
	}
	for _, fs := range devs.Filesystems {
		if fs.Binary != nil && fs.Binary.Path != "" {
			pc.fail(refuse("<filesystem><binary path='%s'>: a peer does not choose programs to run", fs.Binary.Path))
		}
		if src := fs.Source; src != nil {
			switch {
			case src.Mount != nil:
				pc.file("<filesystem><source dir>", src.Mount.Dir)
			case src.Block != nil:
				pc.file("<filesystem><source dev>", src.Block.Dev)
			case src.File != nil:
				pc.file("<filesystem><source file>", src.File.File)
			case src.Bind != nil:
				pc.file("<filesystem><source dir>", src.Bind.Dir)
			case src.Volume != nil:
				pc.fail(refuse("<filesystem type='volume'>: storage pool volumes are not accepted"))
			}
		}
	}
	for _, iface := range devs.Interfaces {
		if iface.Source != nil && iface.Source.Hostdev != nil {
			pc.fail(refuse("<interface type='hostdev'>: host devices are not passed through an incoming migration"))
		}
		if iface.Script != nil || iface.DownScript != nil {
			pc.fail(refuse("<interface><script>: a peer does not choose scripts to run"))
		}
	}
	for _, s := range devs.Serials {
		pc.chardev("<serial>", s.Source, s.Log)
	}
	for _, c := range devs.Consoles {
		pc.chardev("<console>", c.Source, c.Log)
	}
	for _, c := range devs.Channels {
		pc.chardev("<channel>", c.Source, c.Log)
	}
	for _, c := range devs.Parallels {
		pc.chardev("<parallel>", c.Source, c.Log)
	}
}

// pathCheck keeps the first refusal.
type pathCheck struct {
	allowed  []string
	consoles []string
	err      error
}

func (pc *pathCheck) fail(err error) {
	if pc.err == nil {
		pc.err = err
	}
}

// file refuses a local path that is not absolute and under an allowed
// prefix; an empty one names nothing.
func (pc *pathCheck) file(what, path string) {
	if path == "" {
		return
	}
	if err := allowedPath(path, pc.allowed); err != nil {
		pc.fail(refuse("%s %q: %v", what, path, err))
	}
}

// firmwareFile says why path is not a firmware image, or nil. The
// firmware directories are the distribution's, root's: their links are
// its own (Debian's OVMF_CODE_4M.ms.fd is one) and are followed, but what
// they lead to must be a regular file of root's in a firmware directory
// that no one else may write.
func firmwareFile(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || !underAny(path, firmwareDirs) {
		return fmt.Errorf("not under a firmware directory (%s)", strings.Join(firmwareDirs, ", "))
	}
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // nothing there to open: QEMU fails to start
	}
	if err != nil {
		return err
	}
	if !underAny(real, firmwareDirs) {
		return fmt.Errorf("leads to %s, outside the firmware directories", real)
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 0 || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s is not a regular file of root's that only root may write", real)
	}
	return nil
}

func underAny(path string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// console refuses a file chardev or log outside the console dirs: QEMU
// creates or truncates it at Prepare, a dry run's too, so anywhere else a
// peer could name another guest's disk.
func (pc *pathCheck) console(what, path string) {
	if path == "" {
		return
	}
	if len(pc.consoles) == 0 {
		pc.fail(refuse("%s %q: this node takes no file chardevs (--migration-allowed-console-dir): QEMU would create or truncate it at Prepare", what, path))
		return
	}
	if err := allowedPath(path, pc.consoles); err != nil {
		pc.fail(refuse("%s %q: %v: QEMU creates or truncates it at Prepare, so only a console dir may hold it", what, path, err))
	}
}

// firmware refuses a firmware path outside firmwareDirs, or, where
// orAllowed, outside them and the allowed paths.
func (pc *pathCheck) firmware(what, path string, orAllowed bool) {
	if path == "" || firmwareFile(path) == nil {
		return
	}
	if orAllowed {
		pc.file(what, path)
		return
	}
	pc.fail(refuse("%s %q: %v", what, path, firmwareFile(path)))
}

func (pc *pathCheck) diskSource(what string, src *libvirtxml.DomainDiskSource) {
	if src == nil {
		return
	}
	switch {
	case src.File != nil:
		pc.file(what+" file", src.File.File)
	case src.Block != nil:
		pc.file(what+" dev", src.Block.Dev)
	case src.Dir != nil:
		pc.file(what+" dir", src.Dir.Dir)
	case src.Volume != nil:
		pc.fail(refuse("%s: storage pool volumes are not accepted", what))
	case src.NVME != nil:
		pc.fail(refuse("%s: NVMe host devices are not passed through an incoming migration", what))
	case src.VHostUser != nil:
		pc.chardev(what+" vhost-user", (*libvirtxml.DomainChardevSource)(src.VHostUser), nil)
	case src.VHostVDPA != nil:
		pc.file(what+" vhost-vdpa dev", src.VHostVDPA.Dev)
	}
	if src.DataStore != nil {
		pc.diskSource(what+" <dataStore><source>", src.DataStore.Source)
	}
}

func (pc *pathCheck) chardev(what string, src *libvirtxml.DomainChardevSource, log *libvirtxml.DomainChardevLog) {
	if log != nil {
		pc.console(what+" <log file>", log.File)
	}
	if src == nil {
		return
	}
	switch {
	case src.File != nil:
		pc.console(what+" <source path> (file)", src.File.Path)
	case src.Dev != nil:
		pc.file(what+" <source path> (host device)", src.Dev.Path)
	case src.Pipe != nil:
		pc.file(what+" <source path> (pipe)", src.Pipe.Path)
	case src.UNIX != nil:
		pc.file(what+" <source path> (unix socket)", src.UNIX.Path)
	}
}

// relativePath: a value with a slash that does not start with one.
func relativePath(v string) bool {
	return strings.Contains(v, "/") && !strings.HasPrefix(v, "/")
}

// allowedPath says why path may not be used, or nil: it must lie under an
// allowed directory, and resolve there without passing a link.
func allowedPath(path string, allowed []string) error {
	if !filepath.IsAbs(path) {
		return errors.New("not an absolute path")
	}
	clean := filepath.Clean(path)
	// Checked as written: libvirt resolves "dir/link/.." through the link,
	// so what is checked must be what it opens.
	if clean != path {
		return fmt.Errorf("not a clean path (%s): no '.', '..', '//' or trailing slash", clean)
	}
	for _, a := range allowed {
		a = filepath.Clean(a)
		if clean == a || strings.HasPrefix(clean, a+"/") || a == "/" {
			if err := noLinksBeneath(a, clean); err != nil {
				return fmt.Errorf("does not resolve beneath %s without links: %v", a, err)
			}
			return nil
		}
	}
	return fmt.Errorf("not under an allowed path (%s)", strings.Join(allowed, ", "))
}

// sweepXML walks every element and attribute, whatever libvirtxml knows of
// them: anything in the QEMU namespace is refused, and so is any value
// that is an absolute path outside the allowed prefixes, save the few
// places where a path is not a file libvirt opens here.
func sweepXML(domXML string, pol IncomingPolicy) error {
	// The typed checks hold each path to its own place (a disk in the
	// allowed paths, a console file in a console dir); the sweep to any.
	allowed := append(slices.Clip(pol.AllowedPaths), pol.ConsoleDirs...)
	dec := xml.NewDecoder(strings.NewReader(domXML))
	type elem struct {
		name  string
		attrs []xml.Attr
		// device and deviceType are the <devices> child this element is in.
		device, deviceType string
	}
	var stack []elem
	metadata := 0 // depth inside <metadata>, free-form by design
	attr := func(e elem, name string) string {
		for _, a := range e.attrs {
			if a.Name.Local == name {
				return a.Value
			}
		}
		return ""
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return refuse("it does not parse: %v", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if metadata > 0 || (t.Name.Local == "metadata" && len(stack) == 1) {
				metadata++
				stack = append(stack, elem{name: t.Name.Local})
				continue
			}
			if t.Name.Space == qemuNamespace {
				return refuse("<qemu:%s>: QEMU pass-through is not accepted", t.Name.Local)
			}
			for _, a := range t.Attr {
				if a.Name.Space == qemuNamespace {
					return refuse("<%s qemu:%s>: QEMU pass-through is not accepted", t.Name.Local, a.Name.Local)
				}
			}
			e := elem{name: t.Name.Local, attrs: t.Attr}
			parent := elem{}
			if len(stack) > 0 {
				parent = stack[len(stack)-1]
			}
			e.device, e.deviceType = parent.device, parent.deviceType
			if parent.name == "devices" {
				e.device, e.deviceType = e.name, attr(e, "type")
			}
			if err := refusedElement(t, parent.name); err != nil {
				return err
			}
			if err := allowElement(t, parent.name, e.device, e.deviceType, pol); err != nil {
				return err
			}
			// A pty's path is the one the source got; the target opens
			// its own.
			pty := attr(e, "type") == "pty" || (t.Name.Local == "source" && attr(parent, "type") == "pty")
			for _, a := range t.Attr {
				if a.Name.Space == "xmlns" || a.Name.Local == "xmlns" {
					continue
				}
				// libvirtd would resolve a relative path against its own
				// working directory; a network source's name is a remote
				// volume, not a path here.
				if relativePath(a.Value) && !(a.Name.Local == "name" && attr(parent, "type") == "network") {
					return refuse("<%s %s='%s'>: a relative path", t.Name.Local, a.Name.Local, a.Value)
				}
				if strings.HasPrefix(a.Value, "/") && !pty {
					if t.Name.Local == "nvram" && a.Name.Local == "template" && firmwareFile(a.Value) == nil {
						continue // checked as firmware above
					}
					if err := allowedPath(a.Value, allowed); err != nil {
						return refuse("<%s %s='%s'>: %v", t.Name.Local, a.Name.Local, a.Value, err)
					}
				}
			}
			stack = append(stack, e)
		case xml.EndElement:
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			if metadata > 0 {
				metadata--
			}
		case xml.CharData:
			if metadata > 0 || len(stack) == 0 {
				continue
			}
			text := strings.TrimSpace(string(t))
			cur := stack[len(stack)-1]
			switch cur.name {
			case "cmdline", "description", "title", "partition", "label", "imagelabel", "baselabel":
				// Text for the guest or for people, and cgroup and
				// security label names: not files.
				continue
			}
			if relativePath(text) {
				return refuse("<%s>%s</%s>: a relative path", cur.name, text, cur.name)
			}
			if cur.name == "backend" && cur.device == "rng" && attr(cur, "model") == "random" && text != "" {
				// libvirt opens a name that is no path relative to its own
				// working directory.
				if !slices.Contains(rngDevices, text) {
					return refuse("<rng><backend model='random'> %q is not one of %s", text, strings.Join(rngDevices, ", "))
				}
				continue
			}
			if !strings.HasPrefix(text, "/") {
				continue
			}
			switch cur.name {
			case "emulator": // checked against the QEMU binaries
				continue
			case "loader":
				if firmwareFile(text) == nil {
					continue // checked as firmware above
				}
			}
			if err := allowedPath(text, allowed); err != nil {
				return refuse("<%s>%s</%s>: %v", cur.name, text, cur.name, err)
			}
		}
	}
}

// DomainUUID is the UUID a domain XML names; an error if it names none.
func DomainUUID(domXML string) (string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(domXML); err != nil {
		return "", err
	}
	if d.UUID == "" {
		return "", refuse("it names no UUID")
	}
	return strings.ToLower(d.UUID), nil
}

// boundedNesting refuses XML nested deeper, or with longer names, than
// any domain's, reading its tags alone.
func boundedNesting(doc string) error {
	dec := xml.NewDecoder(strings.NewReader(doc))
	depth := 0
	for {
		tok, err := dec.RawToken()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return refuse("it does not parse: %v", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth++; depth > maxDomainDepth {
				return refuse("it nests deeper than any domain's %d elements", maxDomainDepth)
			}
			if long := longName(t); long != "" {
				return refuse("a name is longer than any of libvirt's %d bytes: %.40q...", maxXMLName, long)
			}
		case xml.EndElement:
			depth--
		}
	}
}

// longName is the first name of t, or of its attributes, over maxXMLName.
func longName(t xml.StartElement) string {
	for _, n := range append([]xml.Name{t.Name}, attrNames(t.Attr)...) {
		if len(n.Space)+len(n.Local) > maxXMLName {
			return n.Space + ":" + n.Local
		}
	}
	return ""
}

func attrNames(attrs []xml.Attr) []xml.Name {
	out := make([]xml.Name, len(attrs))
	for i, a := range attrs {
		out[i] = a.Name
	}
	return out
}
