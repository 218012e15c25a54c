// Command ferryd is Ferry's per-node agent: it tracks live migrations on
// the node's libvirt sockets and serves them on a debug socket and /metrics.
package main

import (
	"context"
	"flag"
	"fmt"
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
	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/internal/version"
	"github.com/ferry-vm/ferry/migration/policy"
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

func run(args []string) int {
	fs := flag.NewFlagSet("ferryd", flag.ContinueOnError)
	var (
		cfg      daemon.Config
		sockets  stringList
		allowed  stringList
		bridges  stringList
		networks stringList
		mode     string
		logLevel string
		showVer  bool
		grace    time.Duration
	)
	fs.Var(&sockets, "libvirt-socket", "libvirt socket to watch; repeatable (env FERRY_LIBVIRT_SOCKETS, comma-separated; default "+daemon.DefaultLibvirtSocket+" when no glob is set)")
	fs.StringVar(&cfg.LibvirtGlob, "libvirt-socket-glob", env("FERRY_LIBVIRT_SOCKET_GLOB", ""), "glob of libvirt sockets to watch, followed with inotify and re-read every 5s (one per virt-launcher pod under KubeVirt); default on Kubernetes: KubeVirt's launcher sockets in --kubelet-pods-dir")
	fs.StringVar(&cfg.KubeletPodsDir, "kubelet-pods-dir", env("FERRY_KUBELET_PODS_DIR", "/var/lib/kubelet/pods"), "the kubelet's pods directory as ferryd sees it (the DaemonSet mounts it at /pods, as virt-handler does): KubeVirt's launcher sockets are looked for there when it exists")
	var kubeletRoot string
	fs.StringVar(&kubeletRoot, "kubelet-root", "", "deprecated: use --kubelet-pods-dir ROOT/pods")
	fs.StringVar(&cfg.NodeName, "node-name", env("NODE_NAME", hostname()), "name of this node in jobs and metrics (env NODE_NAME)")
	fs.StringVar(&cfg.DebugSocket, "debug-socket", env("FERRY_DEBUG_SOCKET", "/run/ferry/ferry.sock"), "unix socket serving the JSON debug API read by ferryctl")
	fs.StringVar(&mode, "debug-socket-mode", env("FERRY_DEBUG_SOCKET_MODE", "0600"), "permission bits of the debug socket")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", env("FERRY_METRICS_ADDR", ":9474"), "address serving /metrics, /healthz and /readyz (empty disables)")
	fs.DurationVar(&cfg.SampleInterval, "sample-interval", envDuration("FERRY_SAMPLE_INTERVAL", time.Second), "how often job statistics are sampled (also sampled at once on each migration iteration)")
	fs.DurationVar(&cfg.CallTimeout, "libvirt-timeout", envDuration("FERRY_LIBVIRT_TIMEOUT", 5*time.Second), "deadline of each libvirt call; a daemon that misses it is treated as hung")
	fs.IntVar(&cfg.HistorySize, "history-size", 256, "finished jobs kept in memory")
	fs.StringVar(&cfg.ProxyListen, "proxy-listen", env("FERRY_PROXY_LISTEN", ""), "migration proxy port, HOST:PORT or :PORT to listen on the migration network's address, e.g. :9475; empty (the default) leaves the proxy off, and ferryd only observes (the proxy needs its --proxy-tls-* certificates)")
	fs.BoolVar(&cfg.ProxyTLS, "proxy-tls", envBool("FERRY_PROXY_TLS", true), "mutual TLS between nodes' proxies; false relays plain TCP with zero-copy splice, for a trusted migration network only")
	fs.StringVar(&cfg.ProxyTLSCert, "proxy-tls-cert", env("FERRY_PROXY_TLS_CERT", "/etc/ferry/tls/tls.crt"), "this node's proxy certificate (PEM), reloaded when it changes")
	fs.StringVar(&cfg.ProxyTLSKey, "proxy-tls-key", env("FERRY_PROXY_TLS_KEY", "/etc/ferry/tls/tls.key"), "key of --proxy-tls-cert (PEM)")
	fs.StringVar(&cfg.ProxyTLSCA, "proxy-tls-ca", env("FERRY_PROXY_TLS_CA", "/etc/ferry/tls/ca.crt"), "CA that issues every node's proxy certificate (PEM)")
	fs.StringVar(&cfg.ProxyTLSPeerName, "proxy-tls-peer-name", env("FERRY_PROXY_TLS_PEER_NAME", "ferry"), "DNS name every peer's proxy certificate must carry")
	fs.StringVar(&cfg.ProxyTLSIdentityForm, "proxy-tls-identity-form", env("FERRY_PROXY_TLS_IDENTITY_FORM", ""), "accept only this form of identity in proxy certificates: pod (spiffe://PEER-NAME/ns/NS/pod/POD, placed on a node by the API server) or node (spiffe://PEER-NAME/node/NODE); empty accepts both")
	fs.BoolVar(&cfg.ProxyTLSRequireNodeIdentity, "proxy-tls-require-node-identity", envBool("FERRY_PROXY_TLS_REQUIRE_NODE_IDENTITY", false), "refuse peers whose proxy certificate does not name their node (a URI SAN spiffe://PEER-NAME/node/NODE); this node's own certificate must name it too")
	fs.StringVar(&cfg.PodName, "pod-name", env("POD_NAME", ""), "this ferryd's pod (env POD_NAME), when its proxy certificate names the pod (spiffe://PEER-NAME/ns/NAMESPACE/pod/POD)")
	fs.StringVar(&cfg.PodNamespace, "pod-namespace", env("POD_NAMESPACE", ""), "this ferryd's namespace (env POD_NAMESPACE); peers' certificates naming a ferryd pod are looked up there for its node")
	fs.StringVar(&cfg.ProxyTLSMinVersion, "proxy-tls-min-version", env("FERRY_PROXY_TLS_MIN_VERSION", "1.3"), "lowest TLS version accepted between proxies: 1.3 or 1.2")
	fs.StringVar(&cfg.ProxySocketDir, "proxy-socket-dir", env("FERRY_PROXY_SOCKET_DIR", "/run/ferry/migrationproxy"), "directory of migrations' unix sockets, the source's and the target QEMU's")
	fs.StringVar(&cfg.QEMUGroup, "qemu-group", env("FERRY_QEMU_GROUP", ""), "group (name or gid) QEMU runs with, given the socket dir so QEMU can create and reach its migration sockets; default: ask the node's libvirt (its DAC base label, e.g. libvirt-qemu on Debian)")
	fs.StringVar(&cfg.MigrationInterface, "migration-interface", env("FERRY_MIGRATION_INTERFACE", "migration0"), "interface of the dedicated migration network; its first global unicast address is the proxy's")
	fs.BoolVar(&cfg.MigrationAllowAnyTarget, "migration-allow-any-target", envBool("FERRY_MIGRATION_ALLOW_ANY_TARGET", false), "let a migration Ferry drives go to a proxy address without naming the target's node (targetNode, ferryctl migrate --to-node); a plain-TCP proxy (--proxy-tls=false), or certificates that name no node, need it")
	fs.DurationVar(&cfg.PostCopyRecoveryTimeout, "postcopy-recovery-timeout", envDuration("FERRY_POSTCOPY_RECOVERY_TIMEOUT", drive.DefaultPostCopyRecoveryTimeout), "how long a post-copy migration Ferry drives whose streams broke is held paused on both nodes and resumed over fresh streams (the path back: the link, the peer's proxy, a restarted ferryd) before its guest is declared lost; 0 declares it lost at once (on a target: the most it holds one; the source decides whether to resume it)")
	fs.Var(&networks, "migration-allowed-network", "libvirt network of this node an incoming migration's interfaces may join; repeatable (env FERRY_MIGRATION_ALLOWED_NETWORKS, comma-separated); default none")
	fs.Var(&bridges, "migration-allowed-bridge", "host bridge an incoming migration's interfaces may join; repeatable (env FERRY_MIGRATION_ALLOWED_BRIDGES, comma-separated); default none: a migrated guest's NICs use libvirt networks only")
	fs.Var(&allowed, "migration-allowed-path", "directory under which an incoming migration's domain XML may name local files (disks, kernel, consoles...); repeatable (env FERRY_MIGRATION_ALLOWED_PATHS, comma-separated); default none: keep it as narrow as the guests' files")
	fs.StringVar(&cfg.NodeIP, "node-ip", env("NODE_IP", ""), "this node's IP for the proxy when the migration interface has no address (env NODE_IP)")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", env("KUBECONFIG", ""), "kubeconfig of the API server for KubeVirt VMI reporting; empty uses the in-cluster service account if any, else runs without Kubernetes")
	fs.StringVar(&cfg.StateDir, "state-dir", env("FERRY_STATE_DIR", "/var/lib/ferry"), "where VMI marks wait for the API server, across restarts")
	fs.DurationVar(&grace, "shutdown-grace", envDuration("FERRY_SHUTDOWN_GRACE", daemon.DefaultShutdownGrace), "on SIGTERM, how long migrations in flight through the proxy may go on (new ones are refused) before they are cut; the pod's terminationGracePeriodSeconds must be larger")
	pd := policy.Defaults()
	var policyMode, policyScope string
	fs.StringVar(&policyMode, "policy", env("FERRY_POLICY", string(pd.Mode)), "convergence policy: observe (verdicts only), advise (decide and show, change nothing) or act (steer: raise the downtime to a switch-over within --max-downtime-ms, post-copy if allowed, else abort)")
	fs.StringVar(&policyScope, "policy-scope", env("FERRY_POLICY_SCOPE", string(pd.Scope)), "migrations --policy=act may steer: driven (those Ferry drives; others are advised, their starter runs its own monitor) or all")
	fs.Uint64Var(&cfg.Policy.MaxDowntimeMs, "max-downtime-ms", pd.MaxDowntimeMs, "longest guest pause a policy switch-over may cost (KubeVirt's maxDowntimeMs)")
	fs.BoolVar(&cfg.Policy.AllowPostCopy, "allow-postcopy", envBool("FERRY_ALLOW_POSTCOPY", false), "let the policy switch a migration to post-copy (under --policy act, migrations Ferry drives are then started with post-copy enabled)")
	fs.BoolVar(&cfg.Policy.AllowAutoConverge, "allow-auto-converge", envBool("FERRY_ALLOW_AUTO_CONVERGE", false), "start the migrations Ferry drives with QEMU's auto-converge (it throttles the guest's vCPUs until pre-copy converges); the policy waits while the throttle is still rising")
	fs.Uint64Var(&cfg.Policy.BandwidthPerMigrationMiBs, "bandwidth-per-migration-mibs", 0, "pre-copy bandwidth cap in MiB/s for the migrations Ferry drives that name none (0: none)")
	fs.Uint64Var(&cfg.Policy.CompletionTimeoutPerGiB, "completion-timeout-per-gib", pd.CompletionTimeoutPerGiB, "policy backstop in seconds per GiB of data, for migrations Ferry does not drive (those it drives have their own deadline): then post-copy if allowed, else abort; 0: none")
	fs.StringVar(&logLevel, "log-level", env("FERRY_LOG_LEVEL", "info"), "debug, info, warn or error")
	fs.BoolVar(&showVer, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if showVer {
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
	cfg.Policy.Mode, cfg.Policy.Scope = policy.Mode(policyMode), policy.Scope(policyScope)
	cfg.LibvirtSockets = listOrEnv(sockets, "FERRY_LIBVIRT_SOCKETS")
	cfg.MigrationAllowedBridges = listOrEnv(bridges, "FERRY_MIGRATION_ALLOWED_BRIDGES")
	cfg.MigrationAllowedNetworks = listOrEnv(networks, "FERRY_MIGRATION_ALLOWED_NETWORKS")
	cfg.MigrationAllowedPaths = listOrEnv(allowed, "FERRY_MIGRATION_ALLOWED_PATHS")
	m, err := strconv.ParseUint(mode, 8, 32)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferryd: --debug-socket-mode %q is not an octal mode like 0600\n", mode)
		return 2
	}
	cfg.DebugSocketMode = uint32(m)
	if grace < 0 {
		fmt.Fprintf(os.Stderr, "ferryd: --shutdown-grace %v is negative (0 cuts migrations in flight at once)\n", grace)
		return 2
	}
	cfg.Version = version.Version

	var lvl zapcore.Level
	if err := lvl.Set(logLevel); err != nil {
		fmt.Fprintf(os.Stderr, "ferryd: --log-level %q: %v\n", logLevel, err)
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
	d.ShutdownGrace = grace
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

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

func envBool(key string, def bool) bool {
	v := os.Getenv(key)
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

func envDuration(key string, def time.Duration) time.Duration {
	v := os.Getenv(key)
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

func hostname() string {
	h, _ := os.Hostname()
	return h
}
