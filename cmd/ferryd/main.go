// Command ferryd is Ferry's per-node agent: it tracks live migrations on
// the node's libvirt sockets and serves them on a debug socket and /metrics.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ferry-vm/ferry/daemon"
	"github.com/ferry-vm/ferry/internal/version"
)

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	if v == "" {
		return fmt.Errorf("empty path")
	}
	*s = append(*s, v)
	return nil
}

func main() {
	os.Exit(run(os.Args[1:]))
}

// options are ferryd's command line: the daemon's Config, and what is
// checked or converted before the Config takes it.
type options struct {
	cfg                                           daemon.Config
	sockets, allowed, consoles, bridges, networks stringList
	peers, directPeers                            stringList
	mode, logLevel, kubeletRoot                   string
	policyMode, policyScope                       string
	// maxDowntimeMs is --max-downtime-ms, made a duration once parsed.
	maxDowntimeMs uint64
	// completionPerGiBSecs is --completion-timeout-per-gib, likewise.
	completionPerGiBSecs uint64
	showVer              bool
	grace                time.Duration
}

// newFlags declares ferryd's flags, their defaults read through getenv and
// host. Apart from run so that docs/flags.md is rendered from the very
// FlagSet ferryd parses, with an empty environment and no hostname, the
// same on every machine (TestFlagsDocIsCurrent).
func newFlags(getenv func(string) string, host string) (*flag.FlagSet, *options) {
	fs := flag.NewFlagSet("ferryd", flag.ContinueOnError)
	o := &options{}
	e := envReader(getenv)
	cfg := &o.cfg
	fs.Var(&o.sockets, "libvirt-socket", "libvirt socket to watch, at any path length; one not owned by root is a session daemon's (a virt-launcher's), asked for qemu:///session; repeatable (env FERRY_LIBVIRT_SOCKETS, comma-separated; default "+daemon.DefaultLibvirtSocket+" when no glob is set and --kubelet-pods-dir does not exist)")
	fs.StringVar(&cfg.LibvirtGlob, "libvirt-socket-glob", e.str("FERRY_LIBVIRT_SOCKET_GLOB", ""), "glob of libvirt sockets to watch, followed with inotify (200ms after a burst of changes) and re-read every 5s (one per virt-launcher pod under KubeVirt); default: KubeVirt's launcher sockets in --kubelet-pods-dir, when it exists (env FERRY_LIBVIRT_SOCKET_GLOB)")
	fs.StringVar(&cfg.KubeletPodsDir, "kubelet-pods-dir", e.str("FERRY_KUBELET_PODS_DIR", "/var/lib/kubelet/pods"), "the kubelet's pods directory as ferryd sees it (the DaemonSet mounts it at /pods, as virt-handler does): when it exists, KubeVirt's launcher sockets are looked for there (DIR/*/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock), and a socket under it names its launcher pod (env FERRY_KUBELET_PODS_DIR)")
	fs.StringVar(&o.kubeletRoot, "kubelet-root", "", "deprecated: use --kubelet-pods-dir ROOT/pods, which it still sets, with a warning (env FERRY_KUBELET_ROOT)")
	fs.StringVar(&cfg.NodeName, "node-name", e.str("NODE_NAME", host), "name of this node in jobs and metrics; default: the machine's hostname (env NODE_NAME)")
	fs.StringVar(&cfg.DebugSocket, "debug-socket", e.str("FERRY_DEBUG_SOCKET", "/run/ferry/ferry.sock"), "unix socket serving the JSON debug API read by ferryctl (env FERRY_DEBUG_SOCKET)")
	fs.StringVar(&o.mode, "debug-socket-mode", e.str("FERRY_DEBUG_SOCKET_MODE", "0600"), "permission bits of the debug socket, in octal: whoever may connect may also act on every migration (abort, switch, give up, resolve), so widen it only for those (env FERRY_DEBUG_SOCKET_MODE)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", e.str("FERRY_METRICS_ADDR", ":9474"), "address serving /metrics, /healthz and /readyz; empty disables them (env FERRY_METRICS_ADDR)")
	fs.DurationVar(&cfg.SampleInterval, "sample-interval", e.duration("FERRY_SAMPLE_INTERVAL", time.Second), "how often job statistics are sampled (also sampled at once on each migration iteration) (env FERRY_SAMPLE_INTERVAL)")
	fs.DurationVar(&cfg.CallTimeout, "libvirt-timeout", e.duration("FERRY_LIBVIRT_TIMEOUT", 5*time.Second), "deadline of each libvirt call; a daemon that misses it is treated as hung (env FERRY_LIBVIRT_TIMEOUT)")
	fs.IntVar(&cfg.HistorySize, "history-size", e.int("FERRY_HISTORY_SIZE", 256), "finished jobs kept in memory (env FERRY_HISTORY_SIZE)")
	fs.StringVar(&cfg.ProxyListen, "proxy-listen", e.str("FERRY_PROXY_LISTEN", ""), "migration proxy port, HOST:PORT or :PORT to listen on the migration network's address, e.g. :9475; empty (the default) leaves the proxy off, and ferryd only observes; with --proxy-tls, ferryd does not start without its --proxy-tls-* certificates, naming the missing file (env FERRY_PROXY_LISTEN)")
	fs.BoolVar(&cfg.ProxyTLS, "proxy-tls", e.bool("FERRY_PROXY_TLS", true), "mutual TLS between nodes' proxies; false relays plain TCP with zero-copy splice, for a trusted migration network only (env FERRY_PROXY_TLS)")
	fs.StringVar(&cfg.ProxyTLSCert, "proxy-tls-cert", e.str("FERRY_PROXY_TLS_CERT", "/etc/ferry/tls/tls.crt"), "this node's proxy certificate (PEM), reloaded when it changes (env FERRY_PROXY_TLS_CERT)")
	fs.StringVar(&cfg.ProxyTLSKey, "proxy-tls-key", e.str("FERRY_PROXY_TLS_KEY", "/etc/ferry/tls/tls.key"), "key of --proxy-tls-cert (PEM), reloaded when it changes (env FERRY_PROXY_TLS_KEY)")
	fs.StringVar(&cfg.ProxyTLSCA, "proxy-tls-ca", e.str("FERRY_PROXY_TLS_CA", "/etc/ferry/tls/ca.crt"), "CA that issues every node's proxy certificate (PEM), reloaded when it changes (env FERRY_PROXY_TLS_CA)")
	fs.StringVar(&cfg.ProxyTLSPeerName, "proxy-tls-peer-name", e.str("FERRY_PROXY_TLS_PEER_NAME", "ferry"), "DNS name every peer's proxy certificate must carry; also the trust domain of its spiffe:// node identity (env FERRY_PROXY_TLS_PEER_NAME)")
	fs.StringVar(&cfg.ProxyTLSIdentityForm, "proxy-tls-identity-form", e.str("FERRY_PROXY_TLS_IDENTITY_FORM", ""), "accept only this form of identity in proxy certificates: pod (spiffe://PEER-NAME/ns/NS/pod/POD, placed on a node by the API server) or node (spiffe://PEER-NAME/node/NODE); empty accepts both. With pod, a certificate naming a node outright, which no API server vouches for, is refused (env FERRY_PROXY_TLS_IDENTITY_FORM)")
	fs.BoolVar(&cfg.ProxyTLSRequireNodeIdentity, "proxy-tls-require-node-identity", e.bool("FERRY_PROXY_TLS_REQUIRE_NODE_IDENTITY", false), "refuse peers whose proxy certificate does not name their node (a URI SAN spiffe://PEER-NAME/node/NODE, or .../ns/NS/pod/POD for a ferryd pod); this node's own certificate must name it too; needs --proxy-tls (env FERRY_PROXY_TLS_REQUIRE_NODE_IDENTITY)")
	fs.StringVar(&cfg.PodName, "pod-name", e.str("POD_NAME", ""), "this ferryd's pod (env POD_NAME), when its proxy certificate names the pod (spiffe://PEER-NAME/ns/NAMESPACE/pod/POD)")
	fs.StringVar(&cfg.PodNamespace, "pod-namespace", e.str("POD_NAMESPACE", ""), "this ferryd's namespace (env POD_NAMESPACE); peers' certificates naming a ferryd pod are looked up there for its node")
	fs.StringVar(&cfg.ProxyTLSMinVersion, "proxy-tls-min-version", e.str("FERRY_PROXY_TLS_MIN_VERSION", "1.3"), "lowest TLS version accepted between proxies: 1.3 or 1.2 (env FERRY_PROXY_TLS_MIN_VERSION)")
	fs.DurationVar(&cfg.ProxyFirstStreamWait, "proxy-first-stream-wait", e.duration("FERRY_PROXY_FIRST_STREAM_WAIT", 2*time.Minute), "how long a migration prepared on this node waits for its source to show up: its first stream through the proxy, or on the direct path an open connection to its QEMU (looked at again while only other addresses than the source's are connected); past it the migration is dropped and its target QEMU stopped; 1s to 1h (env FERRY_PROXY_FIRST_STREAM_WAIT)")
	fs.StringVar(&cfg.ProxySocketDir, "proxy-socket-dir", e.str("FERRY_PROXY_SOCKET_DIR", "/run/ferry/migrationproxy"), "directory of migrations' unix sockets, the source's and the target QEMU's (env FERRY_PROXY_SOCKET_DIR)")
	fs.StringVar(&cfg.QEMUGroup, "qemu-group", e.str("FERRY_QEMU_GROUP", ""), "group (name or gid) QEMU runs with, given the socket dir so QEMU can create and reach its migration sockets; default: ask the node's libvirt (its DAC base label, e.g. libvirt-qemu on Debian) (env FERRY_QEMU_GROUP)")
	fs.StringVar(&cfg.MigrationInterface, "migration-interface", e.str("FERRY_MIGRATION_INTERFACE", "migration0"), "interface of the dedicated migration network; its first global unicast address is the proxy's, and its link going down is recorded on the jobs in flight (env FERRY_MIGRATION_INTERFACE)")
	fs.BoolVar(&cfg.MigrationAllowAnyTarget, "migration-allow-any-target", e.bool("FERRY_MIGRATION_ALLOW_ANY_TARGET", false), "let a migration Ferry drives go to a proxy address without naming the target's node (targetNode, ferryctl migrate --to-node); a plain-TCP proxy (--proxy-tls=false), or certificates that name no node, need it (env FERRY_MIGRATION_ALLOW_ANY_TARGET)")
	fs.DurationVar(&cfg.PostCopyRecoveryTimeout, "postcopy-recovery-timeout", e.duration("FERRY_POSTCOPY_RECOVERY_TIMEOUT", daemon.DefaultPostCopyRecoveryTimeout), "how long a post-copy migration Ferry drives whose streams broke may stay paused on both nodes, resumed over fresh streams (the path back: the link, the peer's proxy, a restarted ferryd), before it is overdue and alerts (FerryPostCopyRecoveryOverdue); Ferry goes on trying after that until it resumes or an operator gives up (ferryctl give-up); 0 to 24h; 0 resumes nothing: a broken post-copy is declared lost at once, and its targets then give their QEMU no monitor of Ferry's (on a target: the most it waits before showing overdue; the source decides whether to resume it) (env FERRY_POSTCOPY_RECOVERY_TIMEOUT)")
	fs.Var(&o.networks, "migration-allowed-network", "libvirt network of this node an incoming migration's interfaces may join; repeatable (env FERRY_MIGRATION_ALLOWED_NETWORKS, comma-separated); default none: a network can pass host devices or macvtap a host NIC, so none is taken unless named")
	fs.Var(&o.bridges, "migration-allowed-bridge", "host bridge an incoming migration's interfaces may join; repeatable (env FERRY_MIGRATION_ALLOWED_BRIDGES, comma-separated); default none: a migrated guest's NICs use libvirt networks only")
	fs.Var(&o.allowed, "migration-allowed-path", "directory under which an incoming migration's domain XML may name local files (disks, kernel, nvram...); repeatable (env FERRY_MIGRATION_ALLOWED_PATHS, comma-separated); default none: keep it as narrow as the guests' files")
	fs.Var(&o.consoles, "migration-allowed-console-dir", "directory of guests' console and chardev log files only, the one place an incoming migration's file serial, console, channel or chardev <log> may write (QEMU creates or truncates it at Prepare); repeatable (env FERRY_MIGRATION_ALLOWED_CONSOLE_DIRS, comma-separated); default none: file chardevs are refused")
	fs.BoolVar(&cfg.MigrationAdoptDefined, "migration-adopt-defined", e.bool("FERRY_MIGRATION_ADOPT_DEFINED", false), "let an incoming migration take over a guest this node holds defined and shut off (its definition is replaced by the peer's); default refused: a peer that knows a shut-off guest's name and UUID would run its own memory on that guest's disks. For guests left defined here by virsh migrate --persistent without --undefinesource, or defined on every node (env FERRY_MIGRATION_ADOPT_DEFINED)")
	fs.StringVar(&cfg.NodeIP, "node-ip", e.str("NODE_IP", ""), "this node's IP for the proxy when the migration interface has no address (env NODE_IP)")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", e.str("KUBECONFIG", ""), "kubeconfig of the API server for KubeVirt VMI reporting; empty uses the in-cluster service account if any, else runs without Kubernetes (env KUBECONFIG)")
	fs.StringVar(&cfg.StateDir, "state-dir", e.str("FERRY_STATE_DIR", "/var/lib/ferry"), "where VMI marks wait for the API server, and the migrations Ferry drives, their prepares and recorded post-copy failures are kept, across restarts (env FERRY_STATE_DIR)")
	fs.DurationVar(&o.grace, "shutdown-grace", e.duration("FERRY_SHUTDOWN_GRACE", daemon.DefaultShutdownGrace), "on SIGTERM, how long migrations in flight through the proxy may go on (new ones are refused) before they are cut; 0 cuts them at once; a pod's terminationGracePeriodSeconds must be larger by 20s or more (env FERRY_SHUTDOWN_GRACE)")
	pd := daemon.PolicyDefaults()
	fs.StringVar(&o.policyMode, "policy", e.str("FERRY_POLICY", string(pd.Mode)), "convergence policy: observe (verdicts only), advise (decide and show, change nothing) or act (steer: raise the downtime to a switch-over within --max-downtime-ms, post-copy if allowed, else abort) (env FERRY_POLICY)")
	fs.StringVar(&o.policyScope, "policy-scope", e.str("FERRY_POLICY_SCOPE", string(pd.Scope)), "migrations --policy=act may steer: driven (those Ferry drives; others are advised, their starter runs its own monitor) or all (env FERRY_POLICY_SCOPE)")
	fs.Uint64Var(&o.maxDowntimeMs, "max-downtime-ms", e.uint64("FERRY_MAX_DOWNTIME_MS", uint64(pd.MaxDowntime/time.Millisecond)), "longest guest pause a policy switch-over may cost (KubeVirt's maxDowntimeMs) (env FERRY_MAX_DOWNTIME_MS)")
	fs.BoolVar(&cfg.Policy.AllowPostCopy, "allow-postcopy", e.bool("FERRY_ALLOW_POSTCOPY", false), "let the policy switch a migration to post-copy (under --policy act, migrations Ferry drives are then started with post-copy enabled) (env FERRY_ALLOW_POSTCOPY)")
	fs.BoolVar(&cfg.Policy.AllowAutoConverge, "allow-auto-converge", e.bool("FERRY_ALLOW_AUTO_CONVERGE", false), "start the migrations Ferry drives with QEMU's auto-converge (it throttles the guest's vCPUs until pre-copy converges); the policy waits while the throttle is still rising (env FERRY_ALLOW_AUTO_CONVERGE)")
	fs.Uint64Var(&cfg.Policy.BandwidthPerMigrationMiBs, "bandwidth-per-migration-mibs", e.uint64("FERRY_BANDWIDTH_PER_MIGRATION_MIBS", 0), "pre-copy bandwidth cap in MiB/s for the migrations Ferry drives that name none (0: none) (env FERRY_BANDWIDTH_PER_MIGRATION_MIBS)")
	fs.Uint64Var(&o.completionPerGiBSecs, "completion-timeout-per-gib", e.uint64("FERRY_COMPLETION_TIMEOUT_PER_GIB", uint64(pd.CompletionTimeoutPerGiB/time.Second)), "policy backstop in seconds per GiB of data, for migrations Ferry does not drive (those it drives have their own deadline): then post-copy if allowed, else abort; 0: none (env FERRY_COMPLETION_TIMEOUT_PER_GIB)")
	fs.Var(&o.peers, "peer", "another node Ferry may migrate to by name, NODE=HOST:PORT (its proxy's address), as ferryctl evacuate --to and plan --to name them; repeatable (env FERRY_PEERS, comma-separated)")
	fs.IntVar(&cfg.LinkBandwidthMiBs, "migration-bandwidth-mibs", e.int("FERRY_MIGRATION_BANDWIDTH_MIBS", 0), "the migration link's bandwidth in MiB/s, which the migrations Ferry drives share (the one nearest its switch-over gets the most); 0: not shared out, and plans learn it from the last migrations (env FERRY_MIGRATION_BANDWIDTH_MIBS)")
	fs.IntVar(&cfg.OutboundSlots, "outbound-migrations", e.int("FERRY_OUTBOUND_MIGRATIONS", daemon.DefaultOutboundSlots), "migrations Ferry drives out of this node at once; more wait their turn (env FERRY_OUTBOUND_MIGRATIONS)")
	fs.IntVar(&cfg.InboundSlots, "inbound-migrations", e.int("FERRY_INBOUND_MIGRATIONS", daemon.DefaultInboundSlots), "migrations Ferry drives into this node at once; a source asking for more waits its turn (env FERRY_INBOUND_MIGRATIONS)")
	fs.Var(&o.directPeers, "direct-peers", "nodes this node migrates to and from on the direct path (ferryctl migrate --data-path direct): QEMU straight to QEMU under QEMU's own TLS, no relay; both nodes must list each other, and the certificates in --qemu-tls-dir must come from the proxy's CA; for trusted migration networks on plain libvirt hosts (see docs/proxy.md); repeatable (env FERRY_DIRECT_PEERS, comma-separated)")
	fs.StringVar(&cfg.QEMUConf, "qemu-conf", e.str("FERRY_QEMU_CONF", "/etc/libvirt/qemu.conf"), "libvirt's qemu.conf, read with --direct-peers for the directory of QEMU's migration certificates and whether QEMU checks a source's (env FERRY_QEMU_CONF)")
	fs.StringVar(&cfg.QEMUTLSDir, "qemu-tls-dir", e.str("FERRY_QEMU_TLS_DIR", ""), "that directory as ferryd sees it, where not at the path qemu.conf gives: ca-cert.pem and the server and client pairs QEMU uses on the direct path, checked at start and before every direct migration (env FERRY_QEMU_TLS_DIR)")
	fs.DurationVar(&cfg.DirtyRate.Period, "dirty-rate-period", e.duration("FERRY_DIRTY_RATE_PERIOD", 5*time.Minute), "how often each running domain's dirty rate is measured by QEMU (virDomainStartDirtyRateCalc), never while it migrates; the plans and checks predict from it; 0 turns measuring off (env FERRY_DIRTY_RATE_PERIOD)")
	fs.DurationVar(&cfg.DirtyRate.Sample, "dirty-rate-sample", e.duration("FERRY_DIRTY_RATE_SAMPLE", time.Second), "how long one measurement watches the guest, 1s to 60s (env FERRY_DIRTY_RATE_SAMPLE)")
	fs.IntVar(&cfg.DirtyRate.Concurrent, "dirty-rate-concurrent", e.int("FERRY_DIRTY_RATE_CONCURRENT", 4), "domains measured at once, at most (env FERRY_DIRTY_RATE_CONCURRENT)")
	fs.StringVar(&o.logLevel, "log-level", e.str("FERRY_LOG_LEVEL", "info"), "level of ferryd's JSON logs: debug, info, warn or error (env FERRY_LOG_LEVEL)")
	fs.BoolVar(&o.showVer, "version", false, "print the version and exit")
	return fs, o
}

func run(args []string) int {
	fs, o := newFlags(os.Getenv, hostname())
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, kubeletRoot := o.cfg, o.kubeletRoot
	if o.showVer {
		fmt.Println("ferryd", version.Version)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "ferryd: unexpected argument %q (ferryd takes flags only)\n", fs.Arg(0))
		return 2
	}
	// --kubelet-root (and FERRY_KUBELET_ROOT) still start an older
	// deployment, with a warning; with the new flag too, it is a mistake.
	rootFrom := "--kubelet-root"
	if kubeletRoot == "" {
		kubeletRoot, rootFrom = os.Getenv("FERRY_KUBELET_ROOT"), "FERRY_KUBELET_ROOT"
	}
	if kubeletRoot != "" {
		podsSet := os.Getenv("FERRY_KUBELET_PODS_DIR") != ""
		fs.Visit(func(f *flag.Flag) { podsSet = podsSet || f.Name == "kubelet-pods-dir" })
		if podsSet {
			fmt.Fprintf(os.Stderr, "ferryd: %s and --kubelet-pods-dir both given: keep --kubelet-pods-dir alone\n", rootFrom)
			return 2
		}
		cfg.KubeletPodsDir = filepath.Join(kubeletRoot, "pods")
		fmt.Fprintf(os.Stderr, "ferryd: %s is deprecated: use --kubelet-pods-dir %s\n", rootFrom, cfg.KubeletPodsDir)
	}
	cfg.SetPolicy(o.policyMode, o.policyScope)
	// Past what a duration holds is past any limit: Validate says so.
	cfg.Policy.MaxDowntime = time.Duration(min(o.maxDowntimeMs, math.MaxInt64/uint64(time.Millisecond))) * time.Millisecond
	cfg.Policy.CompletionTimeoutPerGiB = time.Duration(min(o.completionPerGiBSecs, math.MaxInt64/uint64(time.Second))) * time.Second
	cfg.LibvirtSockets = listOrEnv(o.sockets, "FERRY_LIBVIRT_SOCKETS")
	peers, err := daemon.ParsePeers(listOrEnv(o.peers, "FERRY_PEERS"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferryd:", err)
		return 2
	}
	cfg.Peers = peers
	cfg.DirectPeers = listOrEnv(o.directPeers, "FERRY_DIRECT_PEERS")
	cfg.MigrationAllowedBridges = listOrEnv(o.bridges, "FERRY_MIGRATION_ALLOWED_BRIDGES")
	cfg.MigrationAllowedNetworks = listOrEnv(o.networks, "FERRY_MIGRATION_ALLOWED_NETWORKS")
	cfg.MigrationAllowedPaths = listOrEnv(o.allowed, "FERRY_MIGRATION_ALLOWED_PATHS")
	cfg.MigrationAllowedConsoleDirs = listOrEnv(o.consoles, "FERRY_MIGRATION_ALLOWED_CONSOLE_DIRS")
	m, err := strconv.ParseUint(o.mode, 8, 32)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferryd: --debug-socket-mode %q is not an octal mode like 0600\n", o.mode)
		return 2
	}
	cfg.DebugSocketMode = uint32(m)
	if o.grace < 0 {
		fmt.Fprintf(os.Stderr, "ferryd: --shutdown-grace %v is negative (0 cuts migrations in flight at once)\n", o.grace)
		return 2
	}
	cfg.Version = version.Version

	var lvl zapcore.Level
	if err := lvl.Set(o.logLevel); err != nil {
		fmt.Fprintf(os.Stderr, "ferryd: --log-level %q: %v\n", o.logLevel, err)
		return 2
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.EncoderConfig.TimeKey = "time"
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	log, err := zc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferryd:", err)
		return 1
	}
	defer log.Sync()

	d, err := daemon.New(cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferryd: invalid configuration:", err)
		return 2
	}
	d.ShutdownGrace = o.grace
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := d.Run(ctx); err != nil {
		log.Error("ferryd failed", zap.Error(err))
		return 1
	}
	return 0
}

// listOrEnv is a repeatable flag's values, or else the environment
// variable's comma-separated ones.
func listOrEnv(flagged stringList, key string) []string {
	if len(flagged) > 0 {
		return flagged
	}
	var out []string
	for _, v := range strings.Split(os.Getenv(key), ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// envReader reads flags' defaults from the environment.
type envReader func(string) string

func (e envReader) str(key, def string) string {
	if v := e(key); v != "" {
		return v
	}
	return def
}

func (e envReader) bool(key string, def bool) bool {
	v := e(key)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferryd: environment %s=%q is not a boolean\n", key, v)
		os.Exit(2)
	}
	return b
}

func (e envReader) duration(key string, def time.Duration) time.Duration {
	v := e(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferryd: environment %s=%q is not a duration (e.g. 1s)\n", key, v)
		os.Exit(2)
	}
	return d
}

func (e envReader) int(key string, def int) int {
	v := e(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferryd: environment %s=%q is not a whole number\n", key, v)
		os.Exit(2)
	}
	return n
}

func (e envReader) uint64(key string, def uint64) uint64 {
	v := e(key)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferryd: environment %s=%q is not a whole number of 0 or more\n", key, v)
		os.Exit(2)
	}
	return n
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
