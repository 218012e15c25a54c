package libvirtx

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// GuestFiles are the local files a domain names: those that are its own
// (its writable disks, its NVRAM, a writable loader, its console files
// and logs), those guests share read-only (read-only disks such as an
// install ISO, backing images, kernels, initrds, read-only loaders, NVRAM
// templates), and disks it shares writable with others that say so too
// (<shareable/>, a cluster's quorum disk).
type GuestFiles struct {
	Own, Shared, Shareable []string
	// QCOW2 are its disk images libvirt reads as qcow2, whose header may
	// name a backing image that no XML of a shut-off domain does.
	QCOW2 []string
}

// Add takes g's files in too: a guest's live XML and its definition.
func (f *GuestFiles) Add(g GuestFiles) {
	f.Own = append(f.Own, g.Own...)
	f.Shared = append(f.Shared, g.Shared...)
	f.Shareable = append(f.Shareable, g.Shareable...)
	f.QCOW2 = append(f.QCOW2, g.QCOW2...)
}

// FilesOf lists the local files of a domain XML.
func FilesOf(domXML string) (GuestFiles, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(domXML); err != nil {
		return GuestFiles{}, err
	}
	var f GuestFiles
	add := func(to *[]string, p string) {
		if p != "" {
			*to = append(*to, filepath.Clean(p))
		}
	}
	if os := d.OS; os != nil {
		add(&f.Shared, os.Kernel)
		add(&f.Shared, os.Initrd)
		add(&f.Shared, os.DTB)
		if os.ACPI != nil {
			for _, t := range os.ACPI.Tables {
				add(&f.Shared, t.Path)
			}
		}
		if l := os.Loader; l != nil {
			if l.Readonly == "yes" || l.Type == "rom" {
				add(&f.Shared, l.Path)
			} else {
				add(&f.Own, l.Path)
			}
		}
		if n := os.NVRam; n != nil {
			add(&f.Own, n.NVRam)
			add(&f.Shared, n.Template)
			if n.Source != nil {
				add(&f.Own, diskFile(n.Source))
			}
		}
	}
	if devs := d.Devices; devs != nil {
		for _, disk := range devs.Disks {
			switch {
			case disk.ReadOnly != nil:
				add(&f.Shared, diskFile(disk.Source))
			case disk.Shareable != nil:
				add(&f.Shareable, diskFile(disk.Source))
			default:
				add(&f.Own, diskFile(disk.Source))
			}
			if disk.Driver != nil && disk.Driver.Type == "qcow2" && disk.Source != nil && disk.Source.File != nil {
				add(&f.QCOW2, disk.Source.File.File)
			}
			for bs := disk.BackingStore; bs != nil; bs = bs.BackingStore {
				add(&f.Shared, diskFile(bs.Source))
			}
			// An image's external data file is written with it.
			if src := disk.Source; src != nil && src.DataStore != nil {
				add(&f.Own, diskFile(src.DataStore.Source))
			}
		}
		for _, c := range chardevs(devs) {
			if c.src != nil && c.src.File != nil {
				add(&f.Own, c.src.File.Path)
			}
			if c.log != nil {
				add(&f.Own, c.log.File)
			}
		}
	}
	return f, nil
}

func diskFile(src *libvirtxml.DomainDiskSource) string {
	switch {
	case src == nil:
		return ""
	case src.File != nil:
		return src.File.File
	case src.Block != nil:
		return src.Block.Dev
	}
	return ""
}

type chardev struct {
	src *libvirtxml.DomainChardevSource
	log *libvirtxml.DomainChardevLog
}

func chardevs(devs *libvirtxml.DomainDeviceList) []chardev {
	var out []chardev
	for _, s := range devs.Serials {
		out = append(out, chardev{s.Source, s.Log})
	}
	for _, c := range devs.Consoles {
		out = append(out, chardev{c.Source, c.Log})
	}
	for _, c := range devs.Channels {
		out = append(out, chardev{c.Source, c.Log})
	}
	for _, c := range devs.Parallels {
		out = append(out, chardev{c.Source, c.Log})
	}
	return out
}

// OtherGuest is another domain of the node whose files an incoming one
// names, and which file.
type OtherGuest struct {
	Name, File string
}

// TakenFrom says which file of another domain, if any, an incoming
// domain's files take: one of the other's own files named in any role; a
// file the other shares read-only named as the incoming one's own; a disk
// the other shares writable named as anything but a disk shared so too.
// Reading a backing image or an ISO others read is no taking, nor is a
// cluster's shareable disk. Files are compared by what they are, not how
// they are spelt (see fileid.go).
func TakenFrom(in GuestFiles, others map[string]GuestFiles) (OtherGuest, bool) {
	ids := fileIDs{}
	inAll := concat(in.Own, in.Shared, in.Shareable)
	for name, o := range others {
		for _, p := range o.Own {
			if ids.any(inAll, p) {
				return OtherGuest{name, p}, true
			}
		}
		for _, p := range o.Shared {
			if ids.any(in.Own, p) || ids.any(in.Shareable, p) {
				return OtherGuest{name, p}, true
			}
		}
		for _, p := range o.Shareable {
			if ids.any(concat(in.Own, in.Shared), p) {
				return OtherGuest{name, p}, true
			}
		}
	}
	return OtherGuest{}, false
}

// any says whether one of paths overlaps p.
func (ids fileIDs) any(paths []string, p string) bool {
	for _, q := range paths {
		if ids.overlap(q, p) {
			return true
		}
	}
	return false
}

func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// OtherGuestsFiles lists, by name, the files of every domain this libvirt
// holds, running or defined, but the one of uuid: a running domain's live
// XML and, if it is persistent, its definition too (a disk added with
// --config is in the latter alone), and the backing images its qcow2
// headers name (a shut-off domain's XML names none of them). known, when
// set, gives the files of a guest coming here in a migration the caller
// prepared, without asking libvirt: libvirt 11.3 answers no call for such
// a guest's XML, live or inactive, until its migration is over (19 s into
// one on the bed), which held every prepare beside it past the call's
// timeout. It is taken only while libvirt shows the domain coming (paused
// for its migration, or in post-copy), or running while the caller's
// Finish of it runs; otherwise its XML is asked.
func (c *Conn) OtherGuestsFiles(ctx context.Context, uuid string, known func(d libvirt.Domain) (ComingGuest, bool)) (map[string]GuestFiles, error) {
	all, err := c.listDomains(ctx, 0)
	if err != nil {
		return nil, err
	}
	defined, err := c.listDomains(ctx, libvirt.ConnectListDomainsActive|libvirt.ConnectListDomainsPersistent)
	if err != nil {
		return nil, err
	}
	runningDefined := map[string]bool{}
	for _, d := range defined {
		runningDefined[d.Name] = true
	}
	out := map[string]GuestFiles{}
	for _, d := range all {
		if UUIDString(d.UUID) == uuid {
			continue
		}
		f, ok := GuestFiles{}, false
		// A definition kept here beside it (adopted, or kept for the
		// guest's return) is libvirt's alone to name: asked.
		if known != nil && d.ID > 0 && !runningDefined[d.Name] {
			var g ComingGuest
			if g, ok = known(d); ok {
				st, rs, err := c.DomainState(ctx, d)
				ok = err == nil && (Coming(st, rs) || g.Finishing && st == StateRunning)
				f = g.Files
			}
		}
		if !ok {
			var err error
			f, err = c.filesOfDomain(ctx, d, runningDefined[d.Name])
			if IsNoDomain(err) {
				continue // gone meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("domain %s: %w", d.Name, err)
			}
		}
		f.Shared = append(slices.Clone(f.Shared), backingChains(f.QCOW2)...)
		out[d.Name] = f
	}
	return out, nil
}

// ComingGuest is what the caller knows of a guest coming here in a
// migration it prepared: the files of the XML it was checked with, and
// whether libvirt's Finish of it runs here now. That Finish starts the
// guest's vCPUs before it returns, and libvirt holds back the guest's XML
// until then: running, the guest is still its incoming job's.
type ComingGuest struct {
	Files     GuestFiles
	Finishing bool
}

func (c *Conn) listDomains(ctx context.Context, flags libvirt.ConnectListAllDomainsFlags) ([]libvirt.Domain, error) {
	return call(ctx, c, "list all domains", func(l *libvirt.Libvirt) ([]libvirt.Domain, error) {
		doms, _, err := l.ConnectListAllDomains(1, flags)
		return doms, err
	})
}

// filesOfDomain reads the files of d's live XML and, when it runs and is
// defined, of its definition.
func (c *Conn) filesOfDomain(ctx context.Context, d libvirt.Domain, runningDefined bool) (GuestFiles, error) {
	var f GuestFiles
	for i, flags := range []libvirt.DomainXMLFlags{0, libvirt.DomainXMLInactive} {
		if i == 1 && !runningDefined {
			break
		}
		x, err := call(ctx, c, "domain xml", func(l *libvirt.Libvirt) (string, error) {
			return l.DomainGetXMLDesc(d, flags)
		})
		if err != nil {
			return f, err
		}
		g, err := FilesOf(x)
		if err != nil {
			// libvirt took it; a parser that cannot must not stop every
			// incoming migration.
			continue
		}
		f.Add(g)
	}
	return f, nil
}
