package libvirtx

import (
	"context"
	"encoding/xml"
	"path/filepath"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"
)

// kubeVirtNS is the namespace of KubeVirt's domain metadata.
const kubeVirtNS = "http://kubevirt.io"

// DomainKubeVirtUID reads the VMI UID from the domain's KubeVirt metadata
// element: unlike its XML, which waits on an incoming migration's job for
// as long as the migration lasts, libvirt answers it at once. "" when the
// domain has none.
func (c *Conn) DomainKubeVirtUID(ctx context.Context, dom libvirt.Domain) (string, error) {
	md, err := call(ctx, c, "domain metadata", func(l *libvirt.Libvirt) (string, error) {
		return l.DomainGetMetadata(dom, int32(libvirt.DomainMetadataElement), libvirt.OptString{kubeVirtNS}, libvirt.DomainAffectLive)
	})
	if IsNoMetadata(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return uidOfElement(md), nil
}

// uidOfElement reads the UID from KubeVirt's metadata element as libvirt
// gives it, without its namespace (it was asked for by that namespace):
// <kubevirt><uid>…</uid></kubevirt>.
func uidOfElement(md string) string {
	var k struct {
		UID string `xml:"uid"`
	}
	if xml.Unmarshal([]byte(md), &k) != nil {
		return ""
	}
	uid := strings.TrimSpace(k.UID)
	if !canonicalUID(uid) {
		// Kubernetes UIDs are UUIDs: anything else (a pod's libvirt can
		// write what it likes) never reaches a metric label or a mark.
		return ""
	}
	return uid
}

// canonicalUID says whether s is a UUID in its 36-byte text form.
func canonicalUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if r != '-' {
				return false
			}
		case !('0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F'):
			return false
		}
	}
	return true
}

// KubeVirtSocketGlob is where KubeVirt's virt-launcher pods put their
// libvirt's socket, one per pod, in the kubelet's pods directory: the
// emptyDir volume libvirt-runtime, which is the launcher's /var/run/libvirt.
// Under /var/lib/kubelet/pods the path is 121 bytes, past what a unix
// socket address holds; libvirtx dials it through its directory.
func KubeVirtSocketGlob(podsDir string) string {
	return filepath.Join(podsDir, "*", "volumes", "kubernetes.io~empty-dir", "libvirt-runtime", "virtqemud-sock")
}
