package migration

import (
	"regexp"
	"strings"
)

// A namespace is a DNS label and a VMI's name a DNS subdomain (RFC 1123,
// as Kubernetes validates them): neither holds '_', '/' or "..".
var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// vmiName splits a KubeVirt domain name "<namespace>_<name>". A domain name
// comes from whatever serves a libvirt socket, any pod included, and the
// halves go into file names and API paths: only a valid namespace and VMI
// name are read as a VMI.
func vmiName(domain string) (namespace, name string, ok bool) {
	ns, n, found := strings.Cut(domain, "_")
	if !found || len(ns) > 63 || len(n) > 253 || !dnsLabel.MatchString(ns) || !dnsSubdomain.MatchString(n) {
		return "", "", false
	}
	return ns, n, true
}
