package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Options configures Start. The zero value is usable.
type Options struct {
	// Dir is the work directory for PKI, etcd data and logs. Empty means a new
	// temporary directory, removed by Stop.
	Dir string
	// Log receives build output and progress lines; nil discards them.
	Log io.Writer
	// Etcd and APIServer are the binaries to run; empty means Build.
	Etcd, APIServer string
	// StaticTokens are bearer tokens kube-apiserver accepts (--token-auth-file), for
	// tests that want a user without creating a ServiceAccount.
	StaticTokens []StaticToken
	// APIServerArgs are appended to kube-apiserver's flags; a repeated flag overrides
	// the default, e.g. "--feature-gates=...".
	APIServerArgs []string
	// ReadyTimeout bounds each wait for /readyz (default 2 minutes).
	ReadyTimeout time.Duration
}

// StaticToken is one line of kube-apiserver's --token-auth-file.
type StaticToken struct {
	Token, User, UID string
	Groups           []string
}

// Server is a running etcd plus kube-apiserver on 127.0.0.1.
type Server struct {
	Dir        string       // work dir (pki, etcd data, logs)
	Kubeconfig string       // admin kubeconfig path (client cert, system:masters)
	Config     *rest.Config // admin
	URL        string       // https://127.0.0.1:PORT
	EtcdURL    string       // http://127.0.0.1:PORT
	CAData     []byte       // PEM of the CA that signed the serving certificate

	Clientset *kubernetes.Clientset // admin
	Dynamic   dynamic.Interface     // admin

	mapper        *restmapper.DeferredDiscoveryRESTMapper
	readyClient   *http.Client
	readyTimeout  time.Duration
	apiserverBin  string
	apiserverArgs []string
	removeDir     bool
	log           io.Writer

	mu        sync.Mutex
	etcd      *process
	apiserver *process
}

// Start builds the binaries if needed, starts etcd and kube-apiserver on free loopback
// ports, waits for /readyz, installs KubeVirt's VirtualMachineInstance CRD and the
// emulation of virt-api's rules for VMI updates (see virt-api-rules.yaml). Call Stop
// when done, also after an error from a later call.
func Start(ctx context.Context, opts Options) (_ *Server, err error) {
	began := time.Now()
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	if opts.Etcd == "" || opts.APIServer == "" {
		etcd, apiserver, err := Build(ctx, log)
		if err != nil {
			return nil, err
		}
		if opts.Etcd == "" {
			opts.Etcd = etcd
		}
		if opts.APIServer == "" {
			opts.APIServer = apiserver
		}
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}

	s := &Server{Dir: opts.Dir, readyTimeout: opts.ReadyTimeout, apiserverBin: opts.APIServer, log: log}
	if s.Dir == "" {
		if s.Dir, err = os.MkdirTemp("", "ferry-kubeapi-"); err != nil {
			return nil, err
		}
		s.removeDir = true
	} else if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()

	pki, err := newPKI(filepath.Join(s.Dir, "pki"))
	if err != nil {
		return nil, err
	}
	s.CAData = pki.caPEM
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	s.URL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	s.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)

	s.Config = &rest.Config{
		Host: s.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   pki.caPEM,
			CertData: pki.adminCertPEM,
			KeyData:  pki.adminKeyPEM,
		},
		// client-go's default of 5 QPS throttles a test that sets up a few dozen objects.
		QPS:       100,
		Burst:     200,
		UserAgent: "ferry-kubeapi",
	}
	s.Kubeconfig = filepath.Join(s.Dir, "admin.kubeconfig")
	if err := s.writeKubeconfig(s.Kubeconfig, "admin", s.Config); err != nil {
		return nil, err
	}
	if s.readyClient, err = rest.HTTPClientFor(s.Config); err != nil {
		return nil, err
	}
	if s.Clientset, err = kubernetes.NewForConfig(s.Config); err != nil {
		return nil, err
	}
	if s.Dynamic, err = dynamic.NewForConfig(s.Config); err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(s.Config)
	if err != nil {
		return nil, err
	}
	s.mapper = restmapper.NewDeferredDiscoveryRESTMapperWithContext(memory.NewMemCacheClientWithContext(dc))

	s.apiserverArgs = []string{
		"--etcd-servers=" + s.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		// The default reconciler refuses a loopback advertise address.
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + pki.servingCert,
		"--tls-private-key-file=" + pki.servingKey,
		"--client-ca-file=" + pki.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.saPub,
		"--service-account-signing-key-file=" + pki.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		// Else it writes self-signed certificates to /var/run/kubernetes.
		"--cert-dir=" + filepath.Join(s.Dir, "pki", "generated"),
	}
	if len(opts.StaticTokens) > 0 {
		path := filepath.Join(s.Dir, "pki", "tokens.csv")
		if err := writeTokenFile(path, opts.StaticTokens); err != nil {
			return nil, err
		}
		s.apiserverArgs = append(s.apiserverArgs, "--token-auth-file="+path)
	}
	s.apiserverArgs = append(s.apiserverArgs, opts.APIServerArgs...)

	s.etcd, err = startProcess("etcd", filepath.Join(s.Dir, "etcd.log"), opts.Etcd,
		"--name=kubeapi",
		"--data-dir="+filepath.Join(s.Dir, "etcd"),
		"--listen-client-urls="+s.EtcdURL,
		"--advertise-client-urls="+s.EtcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubeapi="+peerURL,
		// Test data is disposable; fsync dominates etcd's latency on a shared disk.
		"--unsafe-no-fsync",
		// A single member elects itself faster with short raft timers.
		"--heartbeat-interval=10",
		"--election-timeout=100",
		"--log-level=warn",
	)
	if err != nil {
		return nil, err
	}
	// kube-apiserver retries etcd until it answers, so there is no separate wait here.
	if err := s.StartAPIServer(ctx); err != nil {
		return nil, err
	}
	if err := s.installCRDs(ctx, vmiCRD); err != nil {
		return nil, err
	}
	if err := s.waitDefaultNamespace(ctx); err != nil {
		return nil, err
	}
	if err := s.installVirtAPIRules(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "kubeapi: %s ready in %s (dir %s)\n", s.URL, time.Since(began).Round(time.Millisecond), s.Dir)
	return s, nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, with the same port,
// certificates and etcd, and waits for /readyz.
func (s *Server) StartAPIServer(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.apiserver != nil && !s.apiserver.exited() {
		return errors.New("kube-apiserver is already running")
	}
	p, err := startProcess("kube-apiserver", filepath.Join(s.Dir, "kube-apiserver.log"), s.apiserverBin, s.apiserverArgs...)
	if err != nil {
		return err
	}
	s.apiserver = p
	return s.waitReady(ctx, p)
}

// StopAPIServer stops kube-apiserver only; etcd keeps the data. Clients see connection
// refused until StartAPIServer.
func (s *Server) StopAPIServer() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.apiserver == nil {
		return nil
	}
	return s.apiserver.stop(15 * time.Second)
}

// Stop stops kube-apiserver and etcd and removes the work dir if Start created it.
// It is safe to call more than once.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	// kube-apiserver first: stopping etcd under it makes it log errors until killed.
	if s.apiserver != nil {
		errs = append(errs, s.apiserver.stop(15*time.Second))
	}
	if s.etcd != nil {
		errs = append(errs, s.etcd.stop(10*time.Second))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if s.removeDir {
		s.removeDir = false
		return os.RemoveAll(s.Dir)
	}
	return nil
}

// PIDs returns the process IDs of etcd and kube-apiserver, 0 for one not running.
func (s *Server) PIDs() (etcd, apiserver int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd != nil && !s.etcd.exited() {
		etcd = s.etcd.pid()
	}
	if s.apiserver != nil && !s.apiserver.exited() {
		apiserver = s.apiserver.pid()
	}
	return etcd, apiserver
}

func (s *Server) waitReady(ctx context.Context, p *process) error {
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.readyTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no answer"
	for {
		if code, err := s.readyz(ctx); err != nil {
			last = err.Error()
		} else if code == http.StatusOK {
			fmt.Fprintf(s.log, "kubeapi: kube-apiserver (pid %d) ready in %s\n", p.pid(), time.Since(began).Round(time.Millisecond))
			return nil
		} else {
			last = fmt.Sprintf("/readyz answered %d", code)
		}
		select {
		case <-p.done:
			return fmt.Errorf("kube-apiserver exited (%v); last lines of %s:\n%s", p.err, p.logPath, p.logTail(30))
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready after %s (%s); last lines of %s:\n%s",
				time.Since(began).Round(time.Millisecond), last, p.logPath, p.logTail(30))
		case <-tick.C:
		}
	}
}

// waitDefaultNamespace waits for the namespace Apply puts unqualified objects in. A
// controller inside kube-apiserver creates it, not necessarily before /readyz.
func (s *Server) waitDefaultNamespace(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, err := s.Clientset.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s: %w", metav1.NamespaceDefault, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Server) readyz(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/readyz", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.readyClient.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// freePorts returns n distinct loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	// Hold every listener until all are chosen so the kernel cannot hand one out twice.
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func writeTokenFile(path string, tokens []StaticToken) error {
	var b strings.Builder
	for _, t := range tokens {
		if t.Token == "" || t.User == "" {
			return errors.New("static token: Token and User are required")
		}
		uid := t.UID
		if uid == "" {
			uid = t.User
		}
		fmt.Fprintf(&b, "%s,%s,%s", t.Token, t.User, uid)
		if len(t.Groups) > 0 {
			fmt.Fprintf(&b, ",%q", strings.Join(t.Groups, ","))
		}
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}
