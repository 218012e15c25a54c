package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The bed's Prometheus runs in node a's network namespace, as a monitoring
// pod would on the cluster network: it scrapes both ferryds on their veth
// addresses, so a scrape crosses the same link as the migrations. Its API
// reaches the host through a unix socket in the bed's directory.
const (
	promNode   = "a"
	promListen = "127.0.0.1:9090"
)

// PrometheusConfig is what the bed's Prometheus evaluates and how often.
type PrometheusConfig struct {
	// Rules is a Prometheus rule file.
	Rules []byte
	// ScrapeInterval and EvalInterval default to 500ms and 1s.
	ScrapeInterval, EvalInterval time.Duration
}

// Prometheus is a real Prometheus server scraping both nodes' ferryds.
type Prometheus struct {
	// Socket serves Prometheus's HTTP API on the host.
	Socket                       string
	Dir                          string
	ScrapeInterval, EvalInterval time.Duration
	hc                           *http.Client
}

// StartPrometheus starts a Prometheus with its own configuration and data
// in the bed's directory; it stops with the bed.
func (b *Bed) StartPrometheus(ctx context.Context, cfg PrometheusConfig) (*Prometheus, error) {
	if cfg.ScrapeInterval == 0 {
		cfg.ScrapeInterval = 500 * time.Millisecond
	}
	if cfg.EvalInterval == 0 {
		cfg.EvalInterval = time.Second
	}
	if len(cfg.Rules) == 0 {
		return nil, fmt.Errorf("testbed: StartPrometheus needs a rule file")
	}
	dir := filepath.Join(b.cfg.Dir, "prometheus")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	// honor_labels as deploy/'s ServiceMonitor: ferryd's own node label
	// wins, the target's labels the series that have none (the proxy's).
	var targets strings.Builder
	for _, d := range nodeDefs {
		fmt.Fprintf(&targets, "  - targets: ['%s:%d']\n    labels: {node: %s}\n", d.ip, metricsPort, d.name)
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[2]s
rule_files: [rules.yaml]
scrape_configs:
- job_name: ferryd
  honor_labels: true
  static_configs:
%[3]s`, model(cfg.ScrapeInterval), model(cfg.EvalInterval), targets.String())
	for name, body := range map[string][]byte{"prometheus.yml": []byte(conf), "rules.yaml": cfg.Rules} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			return nil, err
		}
	}
	// Only the network namespace: the paths here are the host's.
	argv, err := b.nsenterNet(promNode, "prometheus",
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promListen,
		"--log.level=warn")
	if err != nil {
		return nil, err
	}
	p, err := spawn(filepath.Join(dir, "prometheus.log"), argv...)
	if err != nil {
		return nil, err
	}
	if err := b.addPrometheusProc(p); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "api.sock")
	relay, err := b.nsenterNet(promNode, "socat", "UNIX-LISTEN:"+sock+",fork,unlink-early", "TCP:"+promListen)
	if err != nil {
		return nil, err
	}
	r, err := spawn(filepath.Join(dir, "relay.log"), relay...)
	if err != nil {
		return nil, err
	}
	if err := b.addPrometheusProc(r); err != nil {
		return nil, err
	}
	pr := &Prometheus{Socket: sock, Dir: dir, ScrapeInterval: cfg.ScrapeInterval, EvalInterval: cfg.EvalInterval,
		hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			}}}}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		err := pr.ready(ctx)
		if err == nil {
			return pr, nil
		}
		if !p.alive() {
			return nil, fmt.Errorf("testbed: prometheus exited: %s", tail(filepath.Join(dir, "prometheus.log"), 2000))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testbed: prometheus not ready (last: %v): %s", err, tail(filepath.Join(dir, "prometheus.log"), 2000))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (b *Bed) addPrometheusProc(p proc) error {
	b.mu.Lock()
	b.st.Prometheus = append(b.st.Prometheus, p)
	b.mu.Unlock()
	return b.save()
}

// model writes a duration as Prometheus's configuration reads it.
func model(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// ready: the rules are loaded and every target has been scraped, up.
func (p *Prometheus) ready(ctx context.Context) error {
	var groups struct {
		Groups []json.RawMessage `json:"groups"`
	}
	if err := p.get(ctx, "/api/v1/rules", nil, &groups); err != nil {
		return err
	}
	if len(groups.Groups) == 0 {
		return fmt.Errorf("no rule groups loaded")
	}
	up, err := p.Query(ctx, "up")
	if err != nil {
		return err
	}
	if len(up) != len(nodeDefs) {
		return fmt.Errorf("%d targets scraped, want %d", len(up), len(nodeDefs))
	}
	for _, s := range up {
		if s.Value != 1 {
			return fmt.Errorf("target %s is down", s.Metric["instance"])
		}
	}
	return nil
}

// Sample is one series of an instant query's result.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query evaluates expr now. A query Prometheus refuses is an error naming
// the expression and Prometheus's reason.
func (p *Prometheus) Query(ctx context.Context, expr string) ([]Sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	var raw []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	switch data.ResultType {
	case "vector":
		if err := json.Unmarshal(data.Result, &raw); err != nil {
			return nil, fmt.Errorf("query %s: %w", expr, err)
		}
	case "scalar":
		raw = make([]struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}, 1)
		if err := json.Unmarshal(data.Result, &raw[0].Value); err != nil {
			return nil, fmt.Errorf("query %s: %w", expr, err)
		}
	default:
		return nil, fmt.Errorf("query %s: result type %s, want an instant vector or scalar", expr, data.ResultType)
	}
	out := make([]Sample, 0, len(raw))
	for _, r := range raw {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v: %w", expr, r.Value[1], err)
		}
		out = append(out, Sample{Metric: r.Metric, Value: v})
	}
	return out, nil
}

func (p *Prometheus) get(ctx context.Context, path string, q url.Values, v any) error {
	u := "http://prometheus" + path
	if q != nil {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, v)
}

// Alert is one alert as Prometheus's rule manager holds it.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

// Alerts returns the alerts pending or firing now, annotations rendered.
func (p *Prometheus) Alerts(ctx context.Context) ([]Alert, error) {
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	if err := p.get(ctx, "/api/v1/alerts", nil, &data); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	return data.Alerts, nil
}
