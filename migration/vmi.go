package migration

import "strings"

// vmiName splits a KubeVirt domain name "<namespace>_<name>". Namespaces
// and VMI names are DNS names and never contain '_', so a name with exactly
// one underscore and non-empty halves is read as a VMI.
func vmiName(domain string) (namespace, name string, ok bool) {
	ns, n, found := strings.Cut(domain, "_")
	if !found || ns == "" || n == "" || strings.Contains(n, "_") {
		return "", "", false
	}
	return ns, n, true
}
