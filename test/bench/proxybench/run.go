package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// settle lets finished relays (socat's forked children above all) exit and
// be reaped before their CPU is read, so none is missed in between.
const settle = 200 * time.Millisecond

var errInterrupted = errors.New("interrupted")

// bench holds what every run of every variant shares.
type bench struct {
	exe, tlsDir, sockDir string
	bytes                int64
	children             []*child
}

func (b *bench) start(ns, name string, argv ...string) (*child, error) {
	c, err := startIn(ns, name, argv...)
	if err == nil {
		b.children = append(b.children, c)
	}
	return c, err
}

func (b *bench) stopAll() {
	for _, c := range b.children {
		c.stop()
	}
	b.children = nil
}

func runMain(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	size := fs.String("bytes", "2GiB", "bytes per transfer (KiB, MiB, GiB suffixes)")
	runs := fs.Int("runs", 3, "runs per variant; the median is reported")
	parallel := fs.Int("parallel", 4, "connections of the multifd variants; 0 or 1 leaves them out")
	only := fs.String("variants", "", "comma-separated variant keys to run (default all): "+strings.Join(variantKeys(4), ","))
	output := fs.String("o", "text", "text or json")
	profiles := fs.String("cpuprofile", "", "directory each relay process writes a CPU profile to (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *profiles != "" {
		// The relays inherit the environment; each profiles itself.
		if err := os.MkdirAll(*profiles, 0o755); err != nil {
			return err
		}
		os.Setenv(profileEnv, *profiles)
	}
	n, err := parseSize(*size)
	if err != nil {
		return err
	}
	if *runs < 1 || (*output != "text" && *output != "json") {
		return errors.New("need -runs >= 1 and -o text or json")
	}
	vs, err := selectVariants(variants(*parallel), *only)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root, for the network namespaces")
	}
	if slices.ContainsFunc(vs, func(v variant) bool { return v.key == "socat" }) {
		if _, err := exec.LookPath("socat"); err != nil {
			return errors.New("socat is not installed (apt-get install socat), or leave it out with -variants")
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	work, err := os.MkdirTemp("", "proxybench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	b := &bench{exe: exe, tlsDir: filepath.Join(work, "tls"), sockDir: filepath.Join(work, "sockets"), bytes: n}
	if err := os.Mkdir(b.tlsDir, 0o700); err != nil {
		return err
	}
	if err := writeCerts(b.tlsDir); err != nil {
		return err
	}
	if err := createNamespaces(); err != nil {
		return err
	}
	defer deleteNamespaces()
	defer b.stopAll()

	samples := map[string][]sample{}
	// Rounds rather than one variant's runs back to back, so a slow spell
	// of the machine does not fall on one variant only.
	for round := 1; round <= *runs; round++ {
		for _, v := range vs {
			s, err := b.runOnce(ctx, v)
			if ctx.Err() != nil {
				return errInterrupted
			}
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", v.name, round, err)
			}
			samples[v.key] = append(samples[v.key], s)
			fmt.Fprintf(os.Stderr, "run %d/%d  %-20s %7.0f MiB/s  relay CPU %.2f s  (%.2fs)\n",
				round, *runs, v.name, s.MiBps, s.SourceCPU+s.TargetCPU, s.Seconds)
		}
	}
	r := summarize(vs, samples, n, *runs)
	if *output == "json" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(r)
	}
	r.writeText(os.Stdout)
	return nil
}

// runOnce starts the variant's processes afresh, moves the stream once and
// stops them again.
func (b *bench) runOnce(ctx context.Context, v variant) (sample, error) {
	defer b.stopAll()
	os.RemoveAll(b.sockDir)
	if err := os.Mkdir(b.sockDir, 0o700); err != nil {
		return sample{}, err
	}
	p, err := v.setup(b)
	if err != nil {
		return sample{}, err
	}
	control := hostPort(ipB, controlPort)
	sink, err := b.start(nsB, "sink", b.exe, "sink", "-data", p.sinkAt, "-control", control, "-conns", strconv.Itoa(v.conns))
	if err != nil {
		return sample{}, err
	}
	if err := sink.waitListening("tcp", control); err != nil {
		return sample{}, err
	}
	var s sample
	srcBefore, dstBefore, err := relayCPU(p)
	if err != nil {
		return s, err
	}
	hostBefore, err := hostCPU()
	if err != nil {
		return s, err
	}
	res, err := b.write(ctx, p.writeTo, v.conns)
	if err != nil {
		return s, err
	}
	hostAfter, err := hostCPU()
	if err != nil {
		return s, err
	}
	time.Sleep(settle)
	srcAfter, dstAfter, err := relayCPU(p)
	if err != nil {
		return s, err
	}
	select {
	case <-sink.done:
	case <-time.After(5 * time.Second):
		return s, errors.New("the sink did not finish after confirming")
	}
	s = sample{
		Seconds:   round(res.Seconds, 4),
		MiBps:     round(float64(res.Bytes)/(1<<20)/res.Seconds, 1),
		SourceCPU: round(srcAfter-srcBefore, 2),
		TargetCPU: round(dstAfter-dstBefore, 2),
		HostCPU:   round(hostAfter-hostBefore, 2),
	}
	return s, nil
}

func relayCPU(p plan) (source, target float64, err error) {
	if p.source == nil {
		return 0, 0, nil
	}
	if source, err = treeCPU(p.source.pid()); err != nil {
		return 0, 0, err
	}
	target, err = treeCPU(p.target.pid())
	return source, target, err
}

// write runs the writer in ns A and returns its measurement.
func (b *bench) write(ctx context.Context, to string, conns int) (writeResult, error) {
	var res writeResult
	// Bounded at a rate no working variant falls to: 10 MiB/s.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(b.bytes/(10<<20))*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", nsA, b.exe, "write", "-to", to,
		"-control", hostPort(ipB, controlPort), "-bytes", strconv.FormatInt(b.bytes, 10), "-conns", strconv.Itoa(conns))
	cmd.Stderr = os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 3 * time.Second
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return res, fmt.Errorf("writer: %w", ctx.Err())
	}
	if err != nil {
		return res, fmt.Errorf("writer: %w", err)
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("writer output %q: %w", out, err)
	}
	return res, nil
}

func variantKeys(parallel int) []string {
	var keys []string
	for _, v := range variants(parallel) {
		keys = append(keys, v.key)
	}
	return keys
}

func selectVariants(all []variant, only string) ([]variant, error) {
	if only == "" {
		return all, nil
	}
	var out []variant
	for _, key := range strings.Split(only, ",") {
		i := slices.IndexFunc(all, func(v variant) bool { return v.key == strings.TrimSpace(key) })
		if i < 0 {
			return nil, fmt.Errorf("unknown variant %q (known: %s)", key, strings.Join(variantKeys(4), ","))
		}
		out = append(out, all[i])
	}
	return out, nil
}

func parseSize(arg string) (int64, error) {
	s, mult := arg, int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q is not a positive number of bytes, KiB, MiB or GiB", arg)
	}
	return n * mult, nil
}
