// Package kubeapi runs a real kube-apiserver and etcd on loopback for Ferry's tests.
//
// The binaries are built from test/kube/apiserver, a separate Go module, so that
// k8s.io/kubernetes stays out of Ferry's own module. The first build is slow (minutes);
// later ones are served from the Go build cache. Tests that use this package carry the
// build tag "kube" so that a plain "go test ./..." never triggers that build.
//
// VMIs are held to a real cluster's contract: KubeVirt's own VMI CRD (no status
// subresource) and virt-api's rules for VMI updates, emulated with
// ValidatingAdmissionPolicy (virt-api-rules.yaml); KubeVirtConfig acts as KubeVirt.
//
// There is no controller manager, scheduler or kubelet: objects are stored and
// validated, admission and RBAC apply, but nothing reconciles them (no pods run, no
// namespaces are finalized, no garbage collection, no service-account token secrets).
package kubeapi
