// Package daemon wires ferryd together: libvirt connections, the migration
// tracker, the debug socket and the metrics endpoint, and their lifecycle.
package daemon

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// Config is ferryd's whole configuration.
type Config struct {
	NodeName        string
	LibvirtSockets  []string
	LibvirtGlob     string
	DebugSocket     string
	DebugSocketMode uint32
	MetricsAddr     string
	SampleInterval  time.Duration
	CallTimeout     time.Duration
	HistorySize     int
	Version         string

	// ProxyListen is the migration proxy's port (host part optional: the
	// migration IP is used when empty); "" disables the proxy.
	ProxyListen        string
	ProxyTLS           bool
	ProxyTLSCert       string
	ProxyTLSKey        string
	ProxyTLSCA         string
	ProxyTLSPeerName   string
	ProxyTLSMinVersion string
	ProxySocketDir     string
	MigrationInterface string
	NodeIP             string
	// MigrationAllowedPaths are the directories under which the domain XML
	// of an incoming migration may name local files; empty, the default,
	// means none: a peer's XML names no local file unless the operator
	// chose where.
	MigrationAllowedPaths []string

	// Kubeconfig points at the API server; empty uses the in-cluster
	// service account when there is one, else runs without Kubernetes.
	Kubeconfig      string
	StateDir        string
	MarkPhaseFailed bool
}

// DefaultLibvirtSocket is the system libvirtd socket of a plain KVM host.
const DefaultLibvirtSocket = "/run/libvirt/libvirt-sock"

// Validate names the first setting that cannot work.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("--node-name (or NODE_NAME) is empty: ferryd labels every job and metric with it"))
	}
	if c.DebugSocket == "" {
		errs = append(errs, errors.New("--debug-socket is empty"))
	}
	if c.SampleInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--sample-interval %v is below 100ms: libvirt job stats are not updated that often", c.SampleInterval))
	}
	if c.ProxyTLSMinVersion != "" && c.ProxyTLSMinVersion != "1.2" && c.ProxyTLSMinVersion != "1.3" {
		errs = append(errs, fmt.Errorf("--proxy-tls-min-version %q: use 1.2 or 1.3", c.ProxyTLSMinVersion))
	}
	for _, p := range c.MigrationAllowedPaths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			errs = append(errs, fmt.Errorf("--migration-allowed-path %q is not a clean absolute path", p))
		}
	}
	if c.DebugSocketMode&^0o777 != 0 {
		errs = append(errs, fmt.Errorf("--debug-socket-mode %o is not a permission mode", c.DebugSocketMode))
	}
	return errors.Join(errs...)
}
