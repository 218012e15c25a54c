package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// TLSFiles names the PEM files of a node's proxy identity and the CA both
// nodes' certificates are issued by.
type TLSFiles struct {
	Cert, Key, CA string
	// PeerName must appear as a DNS name in the peer's certificate, on both
	// sides; it is how a ferryd knows it is talking to another ferryd and not
	// to any holder of a certificate from the same CA.
	PeerName string
	// RequireNodeIdentity refuses peers whose certificate does not name
	// their node (see NodeIdentityURI): control requests on this node, and
	// targets of this node's migrations.
	RequireNodeIdentity bool
	// IdentityForm, "node" or "pod", accepts only that form of identity:
	// a cluster whose proxies are named by pod must not also take a
	// certificate naming a node outright, which no API server vouches for.
	// Empty accepts both.
	IdentityForm string
	MinVersion   uint16 // default TLS 1.3
}

// tlsSource serves certificates and CA pools from files, reloading them when
// their modification time changes, so rotated certificates take effect on
// the next connection without a restart. A file that fails to parse keeps
// the last good version in use.
type tlsSource struct {
	files TLSFiles

	mu      sync.Mutex
	checked time.Time
	mtimes  [3]time.Time
	cert    *tls.Certificate
	pool    *x509.CertPool
	lastErr error
}

func newTLSSource(f TLSFiles) (*tlsSource, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, errors.New("mutual TLS needs a certificate, a key and a CA file (--proxy-tls-cert, --proxy-tls-key, --proxy-tls-ca), or --proxy-tls=false on a trusted migration network")
	}
	if f.PeerName == "" {
		return nil, errors.New("mutual TLS needs the name peers' certificates carry (--proxy-tls-peer-name)")
	}
	if f.MinVersion == 0 {
		f.MinVersion = tls.VersionTLS13
	}
	s := &tlsSource{files: f}
	if err := s.reload(true); err != nil {
		return nil, err
	}
	return s, nil
}

// reload re-reads the files when they changed (checked at most once a second).
func (s *tlsSource) reload(force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !force && time.Since(s.checked) < time.Second {
		return nil
	}
	s.checked = time.Now()
	var mt [3]time.Time
	for i, p := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		fi, err := os.Stat(p)
		if err != nil {
			return s.fail(fmt.Errorf("proxy TLS file: %w", err))
		}
		mt[i] = fi.ModTime()
	}
	if !force && mt == s.mtimes {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return s.fail(fmt.Errorf("proxy TLS certificate %s / key %s: %w", s.files.Cert, s.files.Key, err))
	}
	caPEM, err := os.ReadFile(s.files.CA)
	if err != nil {
		return s.fail(fmt.Errorf("proxy TLS CA %s: %w", s.files.CA, err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return s.fail(fmt.Errorf("proxy TLS CA %s holds no PEM certificate", s.files.CA))
	}
	s.cert, s.pool, s.mtimes, s.lastErr = &cert, pool, mt, nil
	return nil
}

func (s *tlsSource) fail(err error) error {
	s.lastErr = err
	if s.cert != nil {
		return nil // keep serving with the last good files
	}
	return err
}

func (s *tlsSource) current() (*tls.Certificate, *x509.CertPool) {
	s.reload(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert, s.pool
}

// serverConfig requires and verifies client certificates and the peer name.
func (s *tlsSource) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: s.files.MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := s.current()
			return &tls.Config{
				MinVersion:            s.files.MinVersion,
				Certificates:          []tls.Certificate{*cert},
				ClientAuth:            tls.RequireAndVerifyClientCert,
				ClientCAs:             pool,
				VerifyPeerCertificate: s.verifyPeerName,
				// No resumption: it would skip verifyPeerName, and the
				// ticket would be one more record in the relayed stream.
				SessionTicketsDisabled: true,
			}, nil
		},
	}
}

// clientConfig verifies the target's certificate against the CA and the
// peer name, and presents this node's certificate.
func (s *tlsSource) clientConfig() *tls.Config {
	cert, pool := s.current()
	return &tls.Config{
		MinVersion:   s.files.MinVersion,
		RootCAs:      pool,
		ServerName:   s.files.PeerName,
		Certificates: []tls.Certificate{*cert},
	}
}

func (s *tlsSource) verifyPeerName(_ [][]byte, chains [][]*x509.Certificate) error {
	if len(chains) == 0 || len(chains[0]) == 0 {
		return errors.New("no verified client certificate")
	}
	if err := chains[0][0].VerifyHostname(s.files.PeerName); err != nil {
		return fmt.Errorf("client certificate is not a ferry peer: %w", err)
	}
	return nil
}
