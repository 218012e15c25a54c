// Package ferryd holds the tests of ferryd's Kubernetes side against a real
// kube-apiserver (test/kube/kubeapi) that holds VMIs to a real cluster's contract:
// KubeVirt's own CRD and virt-api's rules, with deploy/'s RBAC. Build tag "kube".
package ferryd
