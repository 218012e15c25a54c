package preflight

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
)

// Reasons lists every reason the domain def cannot, or may not safely, be
// live-migrated to another host: blockers first, then warnings, each in
// the order libvirt writes the elements they come from. It reads only def.
func Reasons(def *libvirtxml.Domain) []api.Blocker {
	if def == nil {
		return nil
	}
	// libvirt writes a domain's elements, and its devices by kind, in one
	// fixed order, the order of libvirtxml's fields; walking them so keeps
	// the result in the order an operator reads the XML.
	var out []api.Blocker
	out = append(out, cpuReasons(def)...)
	if d := def.Devices; d != nil {
		for i := range d.Disks {
			out = append(out, diskReasons(&d.Disks[i])...)
		}
		for i := range d.Filesystems {
			out = append(out, filesystemReasons(&d.Filesystems[i])...)
		}
		for i := range d.Interfaces {
			out = append(out, interfaceReasons(&d.Interfaces[i])...)
		}
		for i := range d.TPMs {
			out = append(out, tpmReasons(&d.TPMs[i])...)
		}
		for i := range d.Hostdevs {
			out = append(out, hostdevReasons(&d.Hostdevs[i])...)
		}
		for i := range d.Shmems {
			out = append(out, shmemReasons(&d.Shmems[i])...)
		}
		out = append(out, vsockReasons(d.VSock)...)
	}
	out = append(out, launchSecurityReasons(def.LaunchSecurity)...)
	slices.SortStableFunc(out, func(a, b api.Blocker) int {
		return rank(a.Severity) - rank(b.Severity)
	})
	return out
}

func rank(s api.Severity) int {
	if s == api.SeverityBlocks {
		return 0
	}
	return 1
}

// ReasonsXML is Reasons of a domain XML as libvirt's virDomainGetXMLDesc
// returns it.
func ReasonsXML(domainXML string) ([]api.Blocker, error) {
	if strings.TrimSpace(domainXML) == "" {
		return nil, errors.New("preflight: the domain XML is empty")
	}
	var def libvirtxml.Domain
	if err := def.Unmarshal(domainXML); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("preflight: the domain XML does not parse: it holds no element")
		}
		return nil, fmt.Errorf("preflight: the domain XML does not parse: %w", err)
	}
	return Reasons(&def), nil
}
