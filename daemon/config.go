// Package daemon wires ferryd together: libvirt connections, the migration
// tracker, the debug socket and the metrics endpoint, and their lifecycle.
package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/measure"
	"github.com/ferry-vm/ferry/migration/policy"
)

// Config is ferryd's whole configuration.
type Config struct {
	NodeName string
	// DirtyRate is how the domains' dirty rates are measured; a zero
	// Period turns it off.
	DirtyRate measure.Config
	// Peers are the proxy addresses of other nodes, by node name.
	Peers map[string]string
	// LinkBandwidthMiBs is the migration link's bandwidth, which the
	// driven migrations share; 0 leaves it unmanaged.
	LinkBandwidthMiBs int
	// OutboundSlots and InboundSlots bound the driven migrations out of
	// and into this node at once (0: drive's defaults).
	OutboundSlots, InboundSlots int
	// DirectPeers are the nodes this node migrates to and from on the
	// direct path, QEMU's own TLS with the certificates in QEMUTLSDir
	// (libvirt's migrate_tls_x509_cert_dir as ferryd sees it; empty: the
	// directory QEMUConf, libvirt's qemu.conf, gives).
	DirectPeers []string
	QEMUTLSDir  string
	QEMUConf    string
	// qemuTLSLibvirtDir is that directory as qemu.conf names it, kept
	// from peers' answers as QEMUTLSDir is.
	qemuTLSLibvirtDir string
	LibvirtSockets    []string
	LibvirtGlob       string
	// KubeletPodsDir is the kubelet's pods directory as ferryd sees it
	// (the DaemonSet mounts it at /pods, as KubeVirt's virt-handler does),
	// where KubeVirt's launcher sockets are found when neither sockets nor
	// a glob are given.
	KubeletPodsDir string
	// GlobEmptyAfter is how long LibvirtGlob may match nothing before
	// /readyz says so; 0 means the pool's default (5 minutes).
	GlobEmptyAfter  time.Duration
	DebugSocket     string
	DebugSocketMode uint32
	MetricsAddr     string
	SampleInterval  time.Duration
	CallTimeout     time.Duration
	HistorySize     int
	Version         string

	// ProxyListen is the migration proxy's port (host part optional: the
	// migration IP is used when empty); "" disables the proxy.
	ProxyListen      string
	ProxyTLS         bool
	ProxyTLSCert     string
	ProxyTLSKey      string
	ProxyTLSCA       string
	ProxyTLSPeerName string
	// ProxyTLSRequireNodeIdentity refuses peers whose certificate does
	// not name their node.
	ProxyTLSRequireNodeIdentity bool
	// ProxyTLSIdentityForm, node or pod, accepts only that form of
	// identity in peers' certificates; empty accepts both.
	ProxyTLSIdentityForm string
	ProxyTLSMinVersion   string
	// PodName and PodNamespace are this ferryd's pod, when it runs in one:
	// a proxy certificate may name the pod instead of the node.
	PodName        string
	PodNamespace   string
	ProxySocketDir string
	// ProxyFirstStreamWait is how long a migration prepared here waits
	// for its source to show up (see proxy.Config.FirstStreamWait).
	ProxyFirstStreamWait time.Duration
	// QEMUGroup is the group (name or gid) QEMU runs with, which gets
	// the socket dir; empty asks the node's libvirt.
	QEMUGroup          string
	MigrationInterface string
	NodeIP             string
	// MigrationAllowedPaths are the directories under which the domain XML
	// of an incoming migration may name local files; empty, the default,
	// means none: a peer's XML names no local file unless the operator
	// chose where.
	MigrationAllowedPaths []string
	// MigrationAllowedConsoleDirs are the directories, of console files
	// only, where an incoming migration's file chardevs and chardev logs
	// may be; none by default, when they are refused.
	MigrationAllowedConsoleDirs []string
	// MigrationAdoptDefined lets an incoming migration take over a guest
	// this node holds defined and shut off, which is refused by default:
	// a peer would run its own memory on that guest's disks.
	MigrationAdoptDefined bool
	// MigrationAllowedBridges are the host bridges an incoming migration's
	// interfaces may join; none unless the operator names some.
	MigrationAllowedBridges []string
	// MigrationAllowedNetworks are the node's libvirt networks they may
	// join; none unless the operator names some.
	MigrationAllowedNetworks []string
	// MigrationAllowAnyTarget lets a migration go to a proxy address
	// without naming the node whose certificate the target must hold.
	MigrationAllowAnyTarget bool
	// PostCopyRecoveryTimeout is how long a broken post-copy migration
	// Ferry drives may stay paused before it is overdue (it alerts, and
	// the attempts go on); 0 resumes none.
	PostCopyRecoveryTimeout time.Duration
	// PostCopyResume is how a broken post-copy is resumed: "libvirt", by
	// libvirt's own protocol wherever the target's libvirt does not crash
	// on it (all but 11.2 and 11.3, which get Ferry's monitor); "monitor",
	// always through Ferry's monitor of the target QEMU. Empty is libvirt.
	PostCopyResume string

	// Kubeconfig points at the API server; empty uses the in-cluster
	// service account when there is one, else runs without Kubernetes.
	Kubeconfig string
	StateDir   string

	// Policy is the node's convergence policy; a migration Ferry drives
	// may override its mode and downtime cap.
	Policy policy.Settings
}

// DefaultLibvirtSocket is the system libvirtd socket of a plain KVM host.
const DefaultLibvirtSocket = "/run/libvirt/libvirt-sock"

// defaultSockets fills in what to watch when nothing is configured, and
// says what it chose and why. KubeVirt's launcher sockets are looked for
// only where a kubelet keeps its pods: on a plain KVM host (a kubeconfig or
// service account alone proves nothing of the node) the glob would match
// nothing while the system libvirtd went unwatched.
func (c *Config) defaultSockets() string {
	if len(c.LibvirtSockets) > 0 || c.LibvirtGlob != "" {
		return ""
	}
	if pods := c.KubeletPodsDir; pods != "" {
		if fi, err := os.Stat(pods); err == nil && fi.IsDir() {
			c.LibvirtGlob = libvirtx.KubeVirtSocketGlob(pods)
			return "KubeVirt launcher sockets, as " + pods + " exists"
		}
	}
	c.LibvirtSockets = []string{DefaultLibvirtSocket}
	return "the system libvirtd, as there is no kubelet pods directory at --kubelet-pods-dir " + c.KubeletPodsDir
}

// Validate names the first setting that cannot work.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("--node-name (or NODE_NAME) is empty: ferryd labels every job and metric with it"))
	}
	if c.DebugSocket == "" {
		errs = append(errs, errors.New("--debug-socket is empty"))
	}
	if d := c.DirtyRate; d.Period < 0 || d.Period > 0 && (d.Sample < time.Second || d.Sample > time.Minute || d.Period < 2*d.Sample || d.Concurrent < 1) {
		errs = append(errs, fmt.Errorf("--dirty-rate-period %v, --dirty-rate-sample %v, --dirty-rate-concurrent %d: want a sample of 1s to 60s, a period of at least two samples (or 0 for none), and at least one at once",
			d.Period, d.Sample, d.Concurrent))
	}
	if w := c.ProxyFirstStreamWait; w < 0 || w > 0 && w < time.Second || w > time.Hour {
		errs = append(errs, fmt.Errorf("--proxy-first-stream-wait %v: want 1s to 1h (0: the default, 2m)", w))
	}
	if c.LinkBandwidthMiBs < 0 || c.OutboundSlots < 0 || c.InboundSlots < 0 {
		errs = append(errs, fmt.Errorf("--migration-bandwidth-mibs %d, --outbound-migrations %d, --inbound-migrations %d: none may be negative (0 slots: the default)",
			c.LinkBandwidthMiBs, c.OutboundSlots, c.InboundSlots))
	}
	if c.SampleInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--sample-interval %v is below 100ms: libvirt job stats are not updated that often", c.SampleInterval))
	}
	if c.ProxyTLSMinVersion != "" && c.ProxyTLSMinVersion != "1.2" && c.ProxyTLSMinVersion != "1.3" {
		errs = append(errs, fmt.Errorf("--proxy-tls-min-version %q: use 1.2 or 1.3", c.ProxyTLSMinVersion))
	}
	switch c.ProxyTLSIdentityForm {
	case "", "node", "pod":
	default:
		errs = append(errs, fmt.Errorf("--proxy-tls-identity-form %q: use node, pod or leave it empty for both", c.ProxyTLSIdentityForm))
	}
	if c.ProxyTLSRequireNodeIdentity && (!c.ProxyTLS || c.ProxyListen == "") {
		errs = append(errs, errors.New("--proxy-tls-require-node-identity needs the proxy with mutual TLS (--proxy-tls): plain TCP names no peer"))
	}
	for _, p := range c.MigrationAllowedPaths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			errs = append(errs, fmt.Errorf("--migration-allowed-path %q is not a clean absolute path", p))
		}
	}
	for _, p := range c.MigrationAllowedConsoleDirs {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			errs = append(errs, fmt.Errorf("--migration-allowed-console-dir %q is not a clean absolute path below /", p))
		}
		for _, a := range c.MigrationAllowedPaths {
			if within(p, a) || within(a, p) {
				errs = append(errs, fmt.Errorf("--migration-allowed-console-dir %q overlaps --migration-allowed-path %q: a console dir must hold no guest's disk, which a file chardev would truncate", p, a))
			}
		}
	}
	if c.PostCopyRecoveryTimeout < 0 || c.PostCopyRecoveryTimeout > 24*time.Hour {
		errs = append(errs, fmt.Errorf("--postcopy-recovery-timeout %v is outside 0 (declare a broken post-copy lost at once) to 24h (when a pause past it alerts): a guest paused on missing pages is an outage", c.PostCopyRecoveryTimeout))
	}
	if c.PostCopyResume != "" && c.PostCopyResume != PostCopyResumeLibvirt && c.PostCopyResume != PostCopyResumeMonitor {
		errs = append(errs, fmt.Errorf("--postcopy-resume %q is neither %q nor %q", c.PostCopyResume, PostCopyResumeLibvirt, PostCopyResumeMonitor))
	}
	if c.DebugSocketMode&^0o777 != 0 {
		errs = append(errs, fmt.Errorf("--debug-socket-mode %o is not a permission mode", c.DebugSocketMode))
	}
	if err := c.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ParsePeers reads --peer NODE=HOST:PORT entries.
func ParsePeers(list []string) (map[string]string, error) {
	peers := map[string]string{}
	for _, p := range list {
		node, addr, ok := strings.Cut(p, "=")
		if _, port, err := net.SplitHostPort(addr); !ok || node == "" || err != nil || port == "" {
			return nil, fmt.Errorf("--peer %q: want NODE=HOST:PORT, the node's name and its proxy's address", p)
		}
		if _, dup := peers[node]; dup {
			return nil, fmt.Errorf("--peer %q: node %s is named twice", p, node)
		}
		peers[node] = addr
	}
	return peers, nil
}

// within says whether path p is dir or under it (clean absolute paths).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
