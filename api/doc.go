// Package api is the wire contract of ferryd's debug API: the jobs,
// domains, requests and answers served on its node-local socket and read
// by ferryctl. It imports only the standard library, so a client needs
// nothing of libvirt, Kubernetes or the daemon to speak it; JSON field
// names are stable.
package api
