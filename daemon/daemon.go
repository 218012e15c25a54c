package daemon

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"k8s.io/client-go/dynamic"

	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/evacuate"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/measure"
	"github.com/ferry-vm/ferry/metrics"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/migration/policy"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// Daemon is a running ferryd.
type Daemon struct {
	cfg Config
	log *zap.Logger
	// readyzSlots bounds the /readyz bodies built at once.
	readyzSlots chan struct{}
	Tracker     *migration.Tracker
	Pool        *libvirtx.Pool
	Proxy       *proxy.Proxy
	reg         *prometheus.Registry
	scrape      *metrics.Handler
	// source drives migrations from this node; nil without the proxy.
	source *drive.Source
	target *drive.Target

	// trials are the domains the driver's migrations that move nothing
	// hold, which the tracker reads.
	trials *drive.Trials
	books  *drive.Books
	// act carries out operators' and the policy's acts on migrations.
	act   *drive.Actuator
	steer *steerer
	// meter measures the domains' dirty rates; nil when that is off.
	meter *measure.Meter
	// evac runs evacuations, plans makes their plans and checks tells
	// what keeps a domain here.
	evac     *evacuate.Runner
	plans    *evacuate.Planner
	checks   *evacuate.Checker
	reporter *kubevirt.Reporter
	// uids are the VMI UIDs of running jobs' domains, by job ID, read
	// when each job started.
	uidMu sync.Mutex
	uids  map[string]string
	vmis  *kubevirt.Watcher
	// vmiUIDs are the VMI UIDs of the node's KubeVirt domains, for
	// ferry_domain_active.
	vmiUIDs *vmiUIDs
	// dyn reads the cluster's objects for plans' advice; nil without
	// Kubernetes.
	dyn dynamic.Interface
	// pods finds peers' nodes from their pods; nil without Kubernetes.
	pods *PodNodes

	// ShutdownGrace is how long Run, once its context ends, lets the
	// migrations going through the proxy finish before cutting them; New
	// sets DefaultShutdownGrace.
	ShutdownGrace time.Duration
}

// DefaultShutdownGrace lets a migration that is converging, or already in
// post-copy, finish when ferryd is stopped: a minute moves some 70 GiB on a
// 10 Gb/s migration network, while a node drain or a rollout of ferryd is
// held up by a minute at most. It must fit in the pod's
// terminationGracePeriodSeconds with room for the rest of the shutdown (up
// to driveSettle, then the HTTP servers' 5 s): past it the kubelet sends
// SIGKILL, which cuts the migrations with nobody reporting them, and
// Kubernetes' default of 30 s is short of even the grace. A pod running
// the proxy needs the grace plus 20 s: 80 s or more for this default (on
// KubeVirt nodes deploy/ leaves the proxy off, and the default is enough).
const DefaultShutdownGrace = 60 * time.Second

// driveSettle bounds the wait, once the proxy has stopped, for driven
// migrations to record how they ended.
const driveSettle = 10 * time.Second

// New builds a daemon from a validated config.
func New(cfg Config, log *zap.Logger) (*Daemon, error) {
	if cfg.Policy == (policy.Settings{}) {
		cfg.Policy = policy.Defaults()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if why := cfg.defaultSockets(); why != "" {
		log.Info("no libvirt socket configured: watching "+why,
			zap.String("glob", cfg.LibvirtGlob), zap.Strings("sockets", cfg.LibvirtSockets))
	}
	d := &Daemon{cfg: cfg, log: log, ShutdownGrace: DefaultShutdownGrace, uids: map[string]string{},
		readyzSlots: make(chan struct{}, readyzAtOnce)}
	d.reg = prometheus.NewRegistry()
	times := metrics.NewTimes(cfg.NodeName, d.reg)
	d.trials, d.books = drive.NewTrials(), drive.NewBooks()
	d.Tracker = migration.NewTracker(migration.Config{
		Node:           cfg.NodeName,
		Trials:         d.trials,
		Driver:         d.books,
		SampleInterval: cfg.SampleInterval,
		HistorySize:    cfg.HistorySize,
		CPU:            &libvirtx.QEMUCgroups{},
		Log:            log.Named("tracker"),
		OnFinish:       d.jobFinished,
		OnStart:        d.jobStarted,
		OnRecovered:    d.postCopyRecovered,
		OnRecovery:     d.reportRecovery,
		// QEMU's own word, through libvirt (a read-only socket cannot ask
		// it, and libvirt's word is then taken).
		VerifyPostCopyFailure: true,
		StateDir:              cfg.StateDir,
		OnTimes:               times.Observe,
	})
	d.books.ShowOn(d.Tracker.Books())
	d.Pool = libvirtx.NewPool(libvirtx.PoolConfig{
		Sockets:        cfg.LibvirtSockets,
		Glob:           cfg.LibvirtGlob,
		GlobEmptyAfter: cfg.GlobEmptyAfter,
		CallTimeout:    cfg.CallTimeout,
	}, d.Tracker, log.Named("libvirt"))
	if err := d.setupKube(); err != nil {
		return nil, err
	}
	col := metrics.NewCollector(cfg.NodeName, cfg.Version, d.Tracker, d.Pool)
	col.LibvirtCalls = libvirtx.Calls
	col.Evacuation = d.lastPlanSeconds
	col.Slots = d.slotUse
	d.vmiUIDs = newVMIUIDs(d.Tracker.Domains, d.readVMIUID)
	col.VMIUID = d.vmiUIDs.get
	if cfg.DirtyRate.Period > 0 {
		d.meter = measure.New(cfg.DirtyRate, d.Tracker, d.Pool, log.Named("measure"))
		col.DirtyRates = func() map[metrics.DomainKey]uint64 {
			out := map[metrics.DomainKey]uint64{}
			for k, v := range d.meter.Latest() {
				out[metrics.DomainKey{Socket: k[0], Domain: k[1]}] = v
			}
			return out
		}
	}
	if d.reporter != nil {
		col.VMI = d.withVMI
		col.MarksPending = func() int { return len(d.reporter.Pending()) }
		col.MarksDelivered = d.reporter.Delivered
		col.ExpectedVMIs = d.vmis.RunningHere
	}
	d.reg.MustRegister(col.Node())
	// The process's own figures (go_goroutines, process_open_fds,
	// process_resident_memory_bytes, ...), as every Prometheus exporter
	// serves them: what a node of many launchers costs ferryd shows there.
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.scrape = metrics.NewHandler(d.reg, col, log.Named("metrics"))
	d.steer = newSteerer(d.Tracker, cfg.Policy, cfg.NodeName, log.Named("policy"), metrics.NewPolicyActions(d.reg))
	d.steer.advised = d.reportAdvice
	if cfg.ProxyListen != "" {
		if err := d.setupMigrations(cfg, log); err != nil {
			return nil, err
		}
	}
	d.act = drive.NewActuator(d.source, d.Pool, d.record())
	d.steer.act = d.act
	d.setupEvacuation(cfg, log.Named("evacuate"))
	return d, nil
}

// record is the tracker as the driver meets it: the jobs it reads, its
// acts, and the driver's own books and trials, which it reads.
func (d *Daemon) record() drive.Record {
	return drive.Record{Jobs: d.Tracker, Acts: d.Tracker.Acts(), Books: d.books, Trials: d.trials}
}

// setupMigrations makes the proxy, this node's target side of migrations
// (with a libvirt socket to run them on) and the source side that drives
// them.
func (d *Daemon) setupMigrations(cfg Config, log *zap.Logger) error {
	var in peer.Incoming
	if len(cfg.LibvirtSockets) > 0 {
		d.target = drive.NewTarget(d.record(), d.Pool, cfg.LibvirtSockets[0], drive.NodePolicy(cfg.MigrationAllowedPaths, cfg.MigrationAllowedConsoleDirs, cfg.MigrationAllowedBridges, cfg.MigrationAllowedNetworks),
			cfg.PostCopyRecoveryTimeout, log.Named("incoming"))
		if cfg.MigrationAdoptDefined {
			d.target.AdoptDefinedGuests()
		}
		d.target.KeepStateIn(cfg.StateDir)
		in = d.target
	}
	group, err := qemuGroup(cfg, d.Pool)
	if err != nil {
		return err
	}
	if cfg.QEMUTLSDir, cfg.qemuTLSLibvirtDir, err = directTLSDir(cfg); err != nil {
		return err
	}
	p, err := newProxy(cfg, log.Named("proxy"), d.reg, d.drivenDomain, in, d.pods, group)
	if err != nil {
		return err
	}
	d.Proxy = p
	d.source = drive.NewSource(drive.SourceConfig{Record: d.record(), Conns: d.Pool, Proxy: p, Policy: cfg.Policy, NodeSockets: cfg.LibvirtSockets,
		AllowAnyTarget: cfg.MigrationAllowAnyTarget, StateDir: cfg.StateDir,
		PostCopyRecoveryTimeout: cfg.PostCopyRecoveryTimeout, ResumeByMonitor: cfg.PostCopyResume == PostCopyResumeMonitor, Quiet: d.quiet, DirtyRate: d.dirtyRate, OutboundSlots: cfg.OutboundSlots,
		LinkBytesPerSecond: uint64(cfg.LinkBandwidthMiBs) << 20, DirectPeers: cfg.DirectPeers, QEMUTLSDir: cfg.QEMUTLSDir, Log: log.Named("drive")})
	if len(cfg.DirectPeers) > 0 {
		// Said at start, not at the first migration an hour later.
		if err := p.DirectReady(cfg.QEMUTLSDir); err != nil {
			return fmt.Errorf("--direct-peers %s: %w", strings.Join(cfg.DirectPeers, ","), err)
		}
		log.Info("the direct path is open to and from these nodes", zap.Strings("directPeers", cfg.DirectPeers), zap.String("qemuTLSDir", cfg.QEMUTLSDir))
	}
	d.steer.driven = d.source.Driven
	return nil
}

// newProxy builds the migration proxy on the migration network's address.
func newProxy(cfg Config, log *zap.Logger, reg prometheus.Registerer, sourceDomain func(string) string, in peer.Incoming,
	pods *PodNodes, group func(context.Context) (int, error)) (*proxy.Proxy, error) {
	host, port, err := net.SplitHostPort(cfg.ProxyListen)
	if err != nil {
		return nil, fmt.Errorf("--proxy-listen %q: %w (want HOST:PORT or :PORT)", cfg.ProxyListen, err)
	}
	if host == "" {
		ip, from, err := migrationIP(cfg.MigrationInterface, cfg.NodeIP)
		if err != nil {
			return nil, err
		}
		if ip != nil {
			host = ip.String()
			log.Info("proxy listens on the migration network", zap.String("ip", host), zap.String("from", from))
		} else {
			log.Warn("no migration interface address and no --node-ip: the proxy listens on every address",
				zap.String("migrationInterface", cfg.MigrationInterface))
		}
	}
	pc := proxy.Config{InboundSlots: cmp.Or(cfg.InboundSlots, drive.DefaultInboundSlots),
		Listen:       net.JoinHostPort(host, port),
		SocketDir:    cfg.ProxySocketDir,
		Node:         cfg.NodeName,
		SourceDomain: sourceDomain,
		Incoming:     in,
		SocketGroup:  group,
		Private:      slices.DeleteFunc(append([]string{cfg.StateDir, cfg.QEMUTLSDir, cfg.qemuTLSLibvirtDir}, cfg.LibvirtSockets...), func(s string) bool { return s == "" }),
		// A source that never shows up must not hold a target QEMU.
		FirstStreamWait: cfg.ProxyFirstStreamWait,
		Log:             log,
		// The same fields: metrics declares the proxy's series, proxy
		// counts into them.
		Metrics:     proxy.Metrics(metrics.NewProxy(reg)),
		DirectPeers: cfg.DirectPeers,
		QEMUTLSDir:  cfg.QEMUTLSDir,
	}
	if cfg.StateDir != "" {
		pc.OutcomeDir = filepath.Join(cfg.StateDir, "incoming-migrations")
	}
	if cfg.PodName != "" {
		pc.Pod = cfg.PodNamespace + "/" + cfg.PodName
	}
	if pods != nil {
		pc.ResolvePod = pods.Resolve
	}
	if cfg.LibvirtGlob != "" {
		pc.Private = append(pc.Private, filepath.Dir(cfg.LibvirtGlob))
	}
	if cfg.ProxyTLS {
		minV := uint16(tls.VersionTLS13)
		if cfg.ProxyTLSMinVersion == "1.2" {
			minV = tls.VersionTLS12
		}
		pc.TLS = &proxy.TLSFiles{Cert: cfg.ProxyTLSCert, Key: cfg.ProxyTLSKey, CA: cfg.ProxyTLSCA,
			PeerName: cfg.ProxyTLSPeerName, RequireNodeIdentity: cfg.ProxyTLSRequireNodeIdentity, IdentityForm: cfg.ProxyTLSIdentityForm, MinVersion: minV}
	}
	return proxy.New(pc)
}

// drivenDomain names the domain of a migration Ferry drives from this node,
// for the proxy's shutdown report.
func (d *Daemon) drivenDomain(migrationID string) string {
	for _, j := range d.Tracker.Jobs(false) {
		if j.Proxy != nil && j.Proxy.MigrationID == migrationID {
			return j.Domain
		}
	}
	return ""
}

// Run serves until ctx ends, then shuts down within a few seconds.
func (d *Daemon) Run(ctx context.Context) error {
	debugLn, metricsLn, err := d.listen()
	if err != nil {
		return err
	}
	defer os.Remove(d.cfg.DebugSocket)
	d.log.Info("ferryd started", zap.String("node", d.cfg.NodeName), zap.String("version", d.cfg.Version),
		zap.Strings("libvirtSockets", d.cfg.LibvirtSockets), zap.String("libvirtGlob", d.cfg.LibvirtGlob),
		zap.String("debugSocket", d.cfg.DebugSocket), zap.String("metricsAddr", d.cfg.MetricsAddr))

	// Watch streams never end on their own: cancelling their base context
	// lets Shutdown finish instead of waiting out its deadline.
	baseCtx, cancelStreams := context.WithCancel(context.Background())
	defer cancelStreams()
	base := func(net.Listener) context.Context { return baseCtx }
	servers := []*http.Server{{Handler: d.apiHandler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute, BaseContext: base}}
	listeners := []net.Listener{debugLn}
	if metricsLn != nil {
		// Reachable from the network: a client that sends or reads slowly
		// holds a connection for a bounded time only.
		servers = append(servers, &http.Server{Handler: d.metricsHandler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10, BaseContext: base})
		listeners = append(listeners, metricsLn)
	}

	poolCtx, stopPool := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	proxyDone := d.startWorkers(poolCtx, &wg)
	errc := make(chan error, len(servers))
	for i, s := range servers {
		go func() {
			if err := s.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	d.log.Info("ferryd shutting down", zap.Duration("shutdownGrace", d.ShutdownGrace))
	// The debug API, libvirt and the tracker stay up while migrations
	// finish: operators can watch or abort them, and a failure the cut
	// causes is still seen and reported on the VMI.
	d.stopProxy()
	<-proxyDone
	if d.source != nil {
		d.source.Settle(driveSettle)
	}
	cancelStreams()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		if err := s.Shutdown(shutdownCtx); err != nil {
			s.Close()
		}
	}
	stopPool()
	wg.Wait()
	d.log.Info("ferryd stopped")
	return runErr
}

// listen opens the debug socket, the proxy's port and the metrics port;
// a port that cannot be had stops ferryd before it starts anything.
func (d *Daemon) listen() (debugLn, metricsLn net.Listener, err error) {
	debugLn, err = listenUnix(d.cfg.DebugSocket, os.FileMode(d.cfg.DebugSocketMode))
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			debugLn.Close()
			os.Remove(d.cfg.DebugSocket)
		}
	}()
	if d.Proxy != nil {
		addr, err := d.Proxy.Listen()
		if err != nil {
			return nil, nil, err
		}
		d.log.Info("migration proxy listening", zap.String("addr", addr.String()), zap.Bool("tls", d.Proxy.TLS()), zap.String("relay", proxy.RelayEngine()))
		if !d.Proxy.TLS() && !d.cfg.MigrationAllowAnyTarget {
			d.log.Warn("the proxy is plain TCP, so no migration this node drives can name its target node; start ferryd with --migration-allow-any-target to drive migrations from here")
		}
	} else {
		d.log.Info("migration proxy off (no --proxy-listen): observing only")
	}
	if d.cfg.MetricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", d.cfg.MetricsAddr); err != nil {
			return nil, nil, fmt.Errorf("--metrics-addr %s: %w", d.cfg.MetricsAddr, err)
		}
	}
	return debugLn, metricsLn, nil
}

// startWorkers starts what runs until poolCtx ends, each counted in wg;
// proxyDone is closed once the proxy has stopped serving.
func (d *Daemon) startWorkers(poolCtx context.Context, wg *sync.WaitGroup) (proxyDone chan struct{}) {
	// What a previous ferryd left is known before the tracker first looks
	// at libvirt: a broken post-copy it was resuming is paused, not failed.
	if d.source != nil {
		d.source.SettleRecorded(poolCtx)
	}
	if d.target != nil {
		d.target.HoldRecorded(poolCtx, d.Proxy.HeldIncoming())
	}
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(poolCtx)
		}()
	}
	run(d.Pool.Run)
	d.runKube(poolCtx)
	run(d.vmiUIDs.run)
	if d.meter != nil {
		run(d.meter.Run)
	}
	if d.source != nil {
		run(d.source.Balance)
	}
	run(d.steer.run)
	proxyDone = make(chan struct{})
	if d.Proxy == nil {
		close(proxyDone)
		return proxyDone
	}
	go func() {
		defer close(proxyDone)
		if err := d.Proxy.Serve(poolCtx); err != nil {
			d.log.Error("migration proxy stopped", zap.Error(err))
		}
	}()
	run(func(ctx context.Context) { watchLink(ctx, d.cfg.MigrationInterface, d.log, d.linkChanged) })
	return proxyDone
}

// stopProxy refuses new migrations and lets those in flight finish within
// the shutdown grace; the proxy logs what it had to cut.
func (d *Daemon) stopProxy() {
	if d.Proxy == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.ShutdownGrace)
	defer cancel()
	if err := d.Proxy.Shutdown(ctx); err != nil {
		d.log.Warn("migrations in flight were cut at shutdown", zap.Error(err))
	}
}

// listenUnix listens on path with the given mode, replacing a stale socket
// left by a crash but never any other kind of file.
func listenUnix(path string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("--debug-socket %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("--debug-socket %s exists and is not a socket; refusing to replace it", path)
		}
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("--debug-socket %s is in use by another running ferryd", path)
		}
		os.Remove(path)
	}
	// Bound in a directory only root can enter, given its mode there, then
	// renamed into place: at path it never has any mode but its own, so no
	// local user can connect in between.
	private, err := os.MkdirTemp(filepath.Dir(path), ".ferry-sock-")
	if err != nil {
		return nil, fmt.Errorf("--debug-socket %s: %w", path, err)
	}
	defer os.RemoveAll(private)
	bound := filepath.Join(private, "s")
	ln, err := net.Listen("unix", bound)
	if err != nil {
		return nil, fmt.Errorf("--debug-socket %s: %w", path, err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	if err := os.Chmod(bound, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("--debug-socket %s: %w", path, err)
	}
	if err := os.Rename(bound, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("--debug-socket %s: %w", path, err)
	}
	return &unlinkOnClose{UnixListener: ul, path: path}, nil
}

// unlinkOnClose removes the socket where it was moved to when it closes.
type unlinkOnClose struct {
	*net.UnixListener
	path string
}

func (l *unlinkOnClose) Close() error {
	err := l.UnixListener.Close()
	os.Remove(l.path)
	return err
}
