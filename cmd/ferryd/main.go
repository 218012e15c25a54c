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
// same on every machine (TestFlagsDocIsCurrent). Each flag's help is one
// line of what it is; the rest there is to know of it goes in flagDetails
// (flagdetails_test.go), which docs/flags.md prints beside that line.
func newFlags(getenv func(string) string, host string) (*flag.FlagSet, *options) {
	fs := flag.NewFlagSet("ferryd", flag.ContinueOnError)
	o := &options{}
	e := envReader(getenv)
	cfg := &o.cfg
	fs.Var(&o.sockets, "libvirt-socket", "libvirt socket to watch; repeatable (env FERRY_LIBVIRT_SOCKETS)")
	fs.StringVar(&cfg.LibvirtGlob, "libvirt-socket-glob", e.str("FERRY_LIBVIRT_SOCKET_GLOB", ""), "glob of libvirt sockets to watch, followed as they come and go (env FERRY_LIBVIRT_SOCKET_GLOB)")
	fs.StringVar(&cfg.KubeletPodsDir, "kubelet-pods-dir", e.str("FERRY_KUBELET_PODS_DIR", "/var/lib/kubelet/pods"), "the kubelet's pods directory as ferryd sees it (env FERRY_KUBELET_PODS_DIR)")
	fs.StringVar(&o.kubeletRoot, "kubelet-root", "", "deprecated: use --kubelet-pods-dir ROOT/pods, which it still sets (env FERRY_KUBELET_ROOT)")
	fs.StringVar(&cfg.NodeName, "node-name", e.str("NODE_NAME", host), "name of this node in jobs and metrics; default: the hostname (env NODE_NAME)")
	fs.StringVar(&cfg.DebugSocket, "debug-socket", e.str("FERRY_DEBUG_SOCKET", "/run/ferry/ferry.sock"), "unix socket serving the JSON debug API read by ferryctl (env FERRY_DEBUG_SOCKET)")
	fs.StringVar(&o.mode, "debug-socket-mode", e.str("FERRY_DEBUG_SOCKET_MODE", "0600"), "octal permission bits of the debug socket; who may connect may act (env FERRY_DEBUG_SOCKET_MODE)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", e.str("FERRY_METRICS_ADDR", ":9474"), "address serving /metrics, /healthz and /readyz; empty disables them (env FERRY_METRICS_ADDR)")
	fs.DurationVar(&cfg.SampleInterval, "sample-interval", e.duration("FERRY_SAMPLE_INTERVAL", time.Second), "how often job statistics are sampled (env FERRY_SAMPLE_INTERVAL)")
	fs.DurationVar(&cfg.CallTimeout, "libvirt-timeout", e.duration("FERRY_LIBVIRT_TIMEOUT", 5*time.Second), "deadline of each libvirt call; a daemon missing it counts as hung (env FERRY_LIBVIRT_TIMEOUT)")
	fs.IntVar(&cfg.HistorySize, "history-size", e.int("FERRY_HISTORY_SIZE", 256), "finished jobs kept in memory (env FERRY_HISTORY_SIZE)")
	fs.StringVar(&cfg.ProxyListen, "proxy-listen", e.str("FERRY_PROXY_LISTEN", ""), "address the migration proxy listens on, HOST:PORT or :PORT; empty: off (env FERRY_PROXY_LISTEN)")
	fs.BoolVar(&cfg.ProxyTLS, "proxy-tls", e.bool("FERRY_PROXY_TLS", true), "mutual TLS between nodes' proxies; false only on a trusted network (env FERRY_PROXY_TLS)")
	fs.StringVar(&cfg.ProxyTLSCert, "proxy-tls-cert", e.str("FERRY_PROXY_TLS_CERT", "/etc/ferry/tls/tls.crt"), "this node's proxy certificate (PEM), reloaded when it changes (env FERRY_PROXY_TLS_CERT)")
	fs.StringVar(&cfg.ProxyTLSKey, "proxy-tls-key", e.str("FERRY_PROXY_TLS_KEY", "/etc/ferry/tls/tls.key"), "key of --proxy-tls-cert (PEM), reloaded when it changes (env FERRY_PROXY_TLS_KEY)")
	fs.StringVar(&cfg.ProxyTLSCA, "proxy-tls-ca", e.str("FERRY_PROXY_TLS_CA", "/etc/ferry/tls/ca.crt"), "CA issuing every node's proxy certificate (PEM), reloaded when it changes (env FERRY_PROXY_TLS_CA)")
	fs.StringVar(&cfg.ProxyTLSPeerName, "proxy-tls-peer-name", e.str("FERRY_PROXY_TLS_PEER_NAME", "ferry"), "DNS name every peer's proxy certificate must carry (env FERRY_PROXY_TLS_PEER_NAME)")
	fs.StringVar(&cfg.ProxyTLSIdentityForm, "proxy-tls-identity-form", e.str("FERRY_PROXY_TLS_IDENTITY_FORM", ""), "identity form accepted from peers: pod or node; empty: both (env FERRY_PROXY_TLS_IDENTITY_FORM)")
	fs.BoolVar(&cfg.ProxyTLSRequireNodeIdentity, "proxy-tls-require-node-identity", e.bool("FERRY_PROXY_TLS_REQUIRE_NODE_IDENTITY", false), "refuse peers whose certificate names no node (env FERRY_PROXY_TLS_REQUIRE_NODE_IDENTITY)")
	fs.StringVar(&cfg.PodName, "pod-name", e.str("POD_NAME", ""), "this ferryd's pod, for a proxy certificate that names it (env POD_NAME)")
	fs.StringVar(&cfg.PodNamespace, "pod-namespace", e.str("POD_NAMESPACE", ""), "this ferryd's namespace, where peers' ferryd pods are looked up (env POD_NAMESPACE)")
	fs.StringVar(&cfg.ProxyTLSMinVersion, "proxy-tls-min-version", e.str("FERRY_PROXY_TLS_MIN_VERSION", "1.3"), "lowest TLS version accepted between proxies: 1.3 or 1.2 (env FERRY_PROXY_TLS_MIN_VERSION)")
	fs.DurationVar(&cfg.ProxyFirstStreamWait, "proxy-first-stream-wait", e.duration("FERRY_PROXY_FIRST_STREAM_WAIT", 2*time.Minute), "how long an incoming migration waits for its source, 1s to 1h (env FERRY_PROXY_FIRST_STREAM_WAIT)")
	fs.StringVar(&cfg.ProxySocketDir, "proxy-socket-dir", e.str("FERRY_PROXY_SOCKET_DIR", "/run/ferry/migrationproxy"), "directory of migrations' unix sockets (env FERRY_PROXY_SOCKET_DIR)")
	fs.StringVar(&cfg.QEMUGroup, "qemu-group", e.str("FERRY_QEMU_GROUP", ""), "group (name or gid) QEMU runs with; default: ask libvirt (env FERRY_QEMU_GROUP)")
	fs.StringVar(&cfg.MigrationInterface, "migration-interface", e.str("FERRY_MIGRATION_INTERFACE", "migration0"), "interface of the dedicated migration network (env FERRY_MIGRATION_INTERFACE)")
	fs.BoolVar(&cfg.MigrationAllowAnyTarget, "migration-allow-any-target", e.bool("FERRY_MIGRATION_ALLOW_ANY_TARGET", false), "allow migrations Ferry drives that name no target node (env FERRY_MIGRATION_ALLOW_ANY_TARGET)")
	fs.DurationVar(&cfg.PostCopyRecoveryTimeout, "postcopy-recovery-timeout", e.duration("FERRY_POSTCOPY_RECOVERY_TIMEOUT", daemon.DefaultPostCopyRecoveryTimeout), "how long a broken post-copy may be paused before it is overdue (env FERRY_POSTCOPY_RECOVERY_TIMEOUT)")
	fs.StringVar(&cfg.PostCopyResume, "postcopy-resume", e.str("FERRY_POSTCOPY_RESUME", daemon.PostCopyResumeLibvirt), "how a broken post-copy is resumed: libvirt or monitor (env FERRY_POSTCOPY_RESUME)")
	fs.Var(&o.networks, "migration-allowed-network", "libvirt network incoming guests' NICs may join; repeatable (env FERRY_MIGRATION_ALLOWED_NETWORKS)")
	fs.Var(&o.bridges, "migration-allowed-bridge", "host bridge incoming guests' NICs may join; repeatable (env FERRY_MIGRATION_ALLOWED_BRIDGES)")
	fs.Var(&o.allowed, "migration-allowed-path", "directory incoming guests' files may lie under; repeatable (env FERRY_MIGRATION_ALLOWED_PATHS)")
	fs.Var(&o.consoles, "migration-allowed-console-dir", "directory for incoming guests' console logs; repeatable (env FERRY_MIGRATION_ALLOWED_CONSOLE_DIRS)")
	fs.BoolVar(&cfg.MigrationAdoptDefined, "migration-adopt-defined", e.bool("FERRY_MIGRATION_ADOPT_DEFINED", false), "let an incoming guest take over its shut-off definition here (env FERRY_MIGRATION_ADOPT_DEFINED)")
	fs.StringVar(&cfg.NodeIP, "node-ip", e.str("NODE_IP", ""), "this node's IP for the proxy when the migration interface has no address (env NODE_IP)")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", e.str("KUBECONFIG", ""), "kubeconfig of the API server, for KubeVirt VMI reporting (env KUBECONFIG)")
	fs.StringVar(&cfg.StateDir, "state-dir", e.str("FERRY_STATE_DIR", "/var/lib/ferry"), "where ferryd keeps what it must know across restarts (env FERRY_STATE_DIR)")
	fs.DurationVar(&o.grace, "shutdown-grace", e.duration("FERRY_SHUTDOWN_GRACE", daemon.DefaultShutdownGrace), "on SIGTERM, how long migrations in flight through the proxy may go on (env FERRY_SHUTDOWN_GRACE)")
	pd := daemon.PolicyDefaults()
	fs.StringVar(&o.policyMode, "policy", e.str("FERRY_POLICY", string(pd.Mode)), "convergence policy: observe, advise or act (env FERRY_POLICY)")
	fs.StringVar(&o.policyScope, "policy-scope", e.str("FERRY_POLICY_SCOPE", string(pd.Scope)), "migrations --policy=act may steer: driven or all (env FERRY_POLICY_SCOPE)")
	fs.Uint64Var(&o.maxDowntimeMs, "max-downtime-ms", e.uint64("FERRY_MAX_DOWNTIME_MS", uint64(pd.MaxDowntime/time.Millisecond)), "longest guest pause a policy switch-over may cost (env FERRY_MAX_DOWNTIME_MS)")
	fs.BoolVar(&cfg.Policy.AllowPostCopy, "allow-postcopy", e.bool("FERRY_ALLOW_POSTCOPY", false), "let the policy switch a migration to post-copy (env FERRY_ALLOW_POSTCOPY)")
	fs.BoolVar(&cfg.Policy.AllowAutoConverge, "allow-auto-converge", e.bool("FERRY_ALLOW_AUTO_CONVERGE", false), "start the migrations Ferry drives with QEMU's auto-converge (env FERRY_ALLOW_AUTO_CONVERGE)")
	fs.Uint64Var(&cfg.Policy.BandwidthPerMigrationMiBs, "bandwidth-per-migration-mibs", e.uint64("FERRY_BANDWIDTH_PER_MIGRATION_MIBS", 0), "per-migration pre-copy bandwidth cap in MiB/s; 0: none (env FERRY_BANDWIDTH_PER_MIGRATION_MIBS)")
	fs.Uint64Var(&o.completionPerGiBSecs, "completion-timeout-per-gib", e.uint64("FERRY_COMPLETION_TIMEOUT_PER_GIB", uint64(pd.CompletionTimeoutPerGiB/time.Second)), "policy backstop in seconds per GiB of data; 0: none (env FERRY_COMPLETION_TIMEOUT_PER_GIB)")
	fs.Var(&o.peers, "peer", "another node to migrate to by name, NODE=HOST:PORT; repeatable (env FERRY_PEERS)")
	fs.IntVar(&cfg.LinkBandwidthMiBs, "migration-bandwidth-mibs", e.int("FERRY_MIGRATION_BANDWIDTH_MIBS", 0), "the migration link's bandwidth in MiB/s (env FERRY_MIGRATION_BANDWIDTH_MIBS)")
	fs.IntVar(&cfg.OutboundSlots, "outbound-migrations", e.int("FERRY_OUTBOUND_MIGRATIONS", daemon.DefaultOutboundSlots), "migrations Ferry drives out of this node at once (env FERRY_OUTBOUND_MIGRATIONS)")
	fs.IntVar(&cfg.InboundSlots, "inbound-migrations", e.int("FERRY_INBOUND_MIGRATIONS", daemon.DefaultInboundSlots), "migrations Ferry drives into this node at once (env FERRY_INBOUND_MIGRATIONS)")
	fs.Var(&o.directPeers, "direct-peers", "nodes this node migrates to and from on the direct path; repeatable (env FERRY_DIRECT_PEERS)")
	fs.StringVar(&cfg.QEMUConf, "qemu-conf", e.str("FERRY_QEMU_CONF", "/etc/libvirt/qemu.conf"), "libvirt's qemu.conf, read with --direct-peers (env FERRY_QEMU_CONF)")
	fs.StringVar(&cfg.QEMUTLSDir, "qemu-tls-dir", e.str("FERRY_QEMU_TLS_DIR", ""), "QEMU's migration certificate directory as ferryd sees it (env FERRY_QEMU_TLS_DIR)")
	fs.DurationVar(&cfg.DirtyRate.Period, "dirty-rate-period", e.duration("FERRY_DIRTY_RATE_PERIOD", 5*time.Minute), "how often each running domain's dirty rate is measured; 0: never (env FERRY_DIRTY_RATE_PERIOD)")
	fs.DurationVar(&cfg.DirtyRate.Sample, "dirty-rate-sample", e.duration("FERRY_DIRTY_RATE_SAMPLE", time.Second), "how long one measurement watches the guest, 1s to 60s (env FERRY_DIRTY_RATE_SAMPLE)")
	fs.IntVar(&cfg.DirtyRate.Concurrent, "dirty-rate-concurrent", e.int("FERRY_DIRTY_RATE_CONCURRENT", 4), "domains measured at once, at most (env FERRY_DIRTY_RATE_CONCURRENT)")
	fs.StringVar(&o.logLevel, "log-level", e.str("FERRY_LOG_LEVEL", "info"), "level of ferryd's JSON logs: debug, info, warn or error (env FERRY_LOG_LEVEL)")
	fs.BoolVar(&o.showVer, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage of ferryd:")
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\n"+helpFooter)
	}
	return fs, o
}

// helpFooter ends --help: each flag's help is one line, and the rest
// there is to know of it (defaults, limits, cautions, how flags bear on
// one another) is in docs/flags.md.
const helpFooter = `A flag's environment variable, when set, is its default; a repeatable flag's is comma-separated.
Each flag in full: docs/flags.md in the source of this version.`

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
