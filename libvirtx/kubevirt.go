package libvirtx

import (
	"encoding/xml"
	"path/filepath"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// KubeVirtUID returns the VMI UID KubeVirt records in a domain's metadata
// (<kubevirt xmlns="http://kubevirt.io"><uid>…</uid>), or "" when the domain
// is not KubeVirt's or the XML cannot be read.
func KubeVirtUID(domainXML string) string {
	var d libvirtxml.Domain
	if err := d.Unmarshal(domainXML); err != nil || d.Metadata == nil {
		return ""
	}
	var md struct {
		KubeVirt []struct {
			UID string `xml:"http://kubevirt.io uid"`
		} `xml:"http://kubevirt.io kubevirt"`
	}
	if err := xml.Unmarshal([]byte("<m>"+d.Metadata.XML+"</m>"), &md); err != nil {
		return ""
	}
	for _, k := range md.KubeVirt {
		if uid := strings.TrimSpace(k.UID); uid != "" {
			return uid
		}
	}
	return ""
}

// KubeVirtSocketGlob is where KubeVirt's virt-launcher pods put their
// libvirt's socket, one per pod, in the kubelet's pods directory: the
// emptyDir volume libvirt-runtime, which is the launcher's /var/run/libvirt.
// Under /var/lib/kubelet/pods the path is 121 bytes, past what a unix
// socket address holds; libvirtx dials it through its directory.
func KubeVirtSocketGlob(podsDir string) string {
	return filepath.Join(podsDir, "*", "volumes", "kubernetes.io~empty-dir", "libvirt-runtime", "virtqemud-sock")
}
