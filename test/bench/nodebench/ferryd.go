package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/api/client"
	"github.com/ferry-vm/ferry/test/testbed"
)

// ferryd is node a's, reached as a node's own programs reach it: the debug
// API over its socket, /metrics over TCP on the node's loopback, where
// Prometheus (through the pod network) would find it.
type ferryd struct {
	pid        int
	api        *client.Client
	metrics    *http.Client
	metricsURL string
}

func newFerryd(b *testbed.Bed, node string) (*ferryd, error) {
	pid := b.FerrydPID(node)
	if pid == 0 {
		return nil, fmt.Errorf("no ferryd runs on node %s: bring the bed up with ferryd (testbed up --ferryd bin/ferryd)", node)
	}
	// The bed starts ferryd through nsenter, which execs it: the PID must
	// be ferryd's own, or every figure would be of a wrapper.
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err != nil || strings.TrimSpace(string(comm)) != "ferryd" {
		return nil, fmt.Errorf("process %d, node %s's ferryd as the bed has it, is %q (%v), not ferryd", pid, node, strings.TrimSpace(string(comm)), err)
	}
	n := b.Node(node)
	// Kept alive between scrapes, as Prometheus keeps its connection: a
	// scrape's time is then ferryd's answer, not the dial into the node.
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return b.DialNode(ctx, node, addr)
		},
		MaxIdleConnsPerHost: 1,
	}
	return &ferryd{
		pid:        pid,
		api:        client.New(n.DebugSocket),
		metrics:    &http.Client{Transport: tr, Timeout: 10 * time.Second},
		metricsURL: "http://" + n.MetricsAddr + "/metrics",
	}, nil
}

// alive says the ferryd measured is still the one running: one that
// crashed and came back would start its counters again.
func (f *ferryd) alive(b *testbed.Bed, node string) error {
	if pid := b.FerrydPID(node); pid != f.pid {
		return fmt.Errorf("node %s's ferryd is no longer process %d (now %d): it restarted or died mid-bench; see its log in the bed's directory", node, f.pid, pid)
	}
	return nil
}

// scrape GETs /metrics and times the whole response, body read to the end.
func (f *ferryd) scrape(ctx context.Context) (page, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.metricsURL, nil)
	if err != nil {
		return page{}, 0, err
	}
	t0 := time.Now()
	resp, err := f.metrics.Do(req)
	if err != nil {
		return page{}, 0, fmt.Errorf("GET %s: %w", f.metricsURL, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(t0)
	if err != nil {
		return page{}, 0, fmt.Errorf("GET %s: %w", f.metricsURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return page{}, 0, fmt.Errorf("GET %s: %s", f.metricsURL, resp.Status)
	}
	p, err := parsePage(string(body))
	return p, took, err
}

// watched is what ferryd's debug API says it watches.
type watched struct {
	up      map[string]api.SocketStatus
	domains map[string]string // domain name -> socket
}

func (f *ferryd) watched(ctx context.Context) (watched, error) {
	resp, err := f.api.Domains(ctx, false)
	if err != nil {
		return watched{}, err
	}
	w := watched{up: map[string]api.SocketStatus{}, domains: map[string]string{}}
	for _, s := range resp.Libvirt {
		if s.Up {
			w.up[s.Socket] = s
		}
	}
	for _, d := range resp.Domains {
		w.domains[d.Name] = d.Socket
	}
	return w, nil
}

// waitSeen waits until ferryd lists every launcher's socket up and its
// domain on it, and says how many it still missed when time ran out.
func (f *ferryd) waitSeen(parent context.Context, ls []*testbed.Launcher, within time.Duration) error {
	ctx, cancel := context.WithTimeout(parent, within)
	defer cancel()
	for {
		w, err := f.watched(ctx)
		missing := 0
		example := ""
		if err == nil {
			for _, l := range ls {
				if _, up := w.up[l.Socket]; !up || w.domains[l.Domain] != l.Socket {
					missing++
					example = l.Domain
				}
			}
			if missing == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return parent.Err()
			}
			if err != nil {
				return fmt.Errorf("ferryd's debug API: %w", err)
			}
			return fmt.Errorf("after %v ferryd still lacks %d of %d launchers (e.g. %s): socket not up or domain not listed", within, missing, len(ls), example)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
