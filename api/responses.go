package api

import "time"

// JobsResponse is GET /v1/jobs.
type JobsResponse struct {
	Node string `json:"node"`
	Jobs []Job  `json:"jobs"`
}

// DomainsResponse is GET /v1/domains.
type DomainsResponse struct {
	Node    string         `json:"node"`
	Domains []Domain       `json:"domains"`
	Libvirt []SocketStatus `json:"libvirt"`
}

// SocketStatus is ferryd's connection to one libvirt socket.
type SocketStatus struct {
	Socket         string `json:"socket"`
	Up             bool   `json:"up"`
	LibvirtVersion string `json:"libvirtVersion,omitempty"`
	// QEMUVersion is the QEMU's behind it, as libvirt says.
	QEMUVersion   string    `json:"qemuVersion,omitempty"`
	LastError     string    `json:"lastError,omitempty"`
	Since         time.Time `json:"since"`
	Reconnects    int       `json:"reconnects"`
	LastPingMicro int64     `json:"lastPingMicroseconds,omitempty"`
	// UnresponsiveSince is when libvirt last answered, while ferryd holds
	// it hung (a ping past its deadline, a keepalive's silence); absent
	// otherwise.
	UnresponsiveSince time.Time `json:"unresponsiveSince,omitzero"`
}

// ErrorResponse is every 4xx/5xx body.
type ErrorResponse struct {
	Error string `json:"error"`
}

// ProxyResponse is GET /v1/proxy.
type ProxyResponse struct {
	Enabled    bool             `json:"enabled"`
	TLS        bool             `json:"tls"`
	SocketDir  string           `json:"socketDir,omitempty"`
	Registered []ProxyMigration `json:"registered"`
}

// ProxyMigration is an incoming migration this node's proxy holds. Its ID
// is shown as a reference only: the ID itself admits streams.
type ProxyMigration struct {
	ID      string            `json:"id"`
	Domain  string            `json:"domain"`
	Targets map[string]string `json:"targets"` // stream -> local unix socket
	Limits  map[string]int    `json:"limits"`  // stream -> connections allowed
	Expires time.Time         `json:"expires"`
	State   string            `json:"state"`
	// PeerNode is the node that prepared it, as its certificate names it.
	PeerNode string `json:"peerNode,omitempty"`
	// RecoveryOf, for the streams of a post-copy's recovery, is the
	// migration they resume.
	RecoveryOf string `json:"recoveryOf,omitempty"`
}

// MessageResponse answers a request ferryd took up and carries out on its
// own time: a resolve, a recovery's retry or give-up.
type MessageResponse struct {
	Message string `json:"message"`
}
