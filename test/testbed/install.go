package testbed

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Prepare makes the host able to run a bed: packages, the libvirt-qemu
// account, and the guest kernel + initramfs in CacheDir. It only does what
// is missing, so it is cheap to call before every test run.
func Prepare(ctx context.Context, cfg Config) error {
	cfg, err := cfg.resolve()
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("testbed: Prepare needs root")
	}
	t0 := time.Now()
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return err
	}
	// Parallel test binaries may all call Prepare; one of them does the work.
	lock, err := os.OpenFile(filepath.Join(cfg.CacheDir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	if err := installPackages(ctx, cfg); err != nil {
		return err
	}
	if err := installPrometheus(ctx, cfg); err != nil {
		return err
	}
	if err := ensureQemuAccount(ctx); err != nil {
		return err
	}
	if err := ensureKernel(ctx, cfg); err != nil {
		return err
	}
	if err := ensureInitrd(ctx, cfg); err != nil {
		return err
	}
	if err := ensureStacks(ctx, cfg); err != nil {
		return err
	}
	logf(cfg.Log, "prepared in %.1fs (cache %s)", time.Since(t0).Seconds(), cfg.CacheDir)
	return nil
}

// Debian 12's own QEMU 7.2 corrupts TCG guests on live migration; these are
// the oldest versions the bed is known to work with (bookworm-backports).
const (
	minLibvirtMajor = 11
	minQemuMajor    = 10
)

const bashCompletion = "/usr/share/bash-completion/bash_completion"

var versionRe = regexp.MustCompile(`(\d+)\.(\d+)\.(\d+)`)

func toolMajor(ctx context.Context, tool string) int {
	out, err := exec.CommandContext(ctx, tool, "--version").Output()
	if err != nil {
		return 0
	}
	m := versionRe.FindSubmatch(out)
	if m == nil {
		return 0
	}
	major, _ := strconv.Atoi(string(m[1]))
	return major
}

func installPackages(ctx context.Context, cfg Config) error {
	var pkgs []string
	virtOK := toolMajor(ctx, "libvirtd") >= minLibvirtMajor && toolMajor(ctx, "qemu-system-x86_64") >= minQemuMajor
	if !virtOK {
		pkgs = append(pkgs, "libvirt-daemon", "libvirt-daemon-driver-qemu", "libvirt-clients", "qemu-system-x86")
	}
	for tool, pkg := range map[string]string{"socat": "socat", "ip": "iproute2", "ss": "iproute2", "nsenter": "util-linux", "unshare": "util-linux"} {
		if _, err := exec.LookPath(tool); err != nil && !contains(pkgs, pkg) {
			pkgs = append(pkgs, pkg)
		}
	}
	// ferryctl's completion tests run its scripts in the shells they are for.
	if _, err := os.Stat(bashCompletion); err != nil {
		pkgs = append(pkgs, "bash-completion")
	}
	if _, err := exec.LookPath("zsh"); err != nil {
		pkgs = append(pkgs, "zsh")
	}
	// Other stacks' root filesystems are built from Debian's packages.
	if _, err := exec.LookPath("mmdebstrap"); err != nil && cfg.needsStacks() {
		pkgs = append(pkgs, "mmdebstrap")
	}
	if len(pkgs) == 0 {
		return nil
	}
	codename := osRelease("VERSION_CODENAME")
	args := []string{"install", "-y", "-qq", "--no-install-recommends"}
	if codename == "bookworm" {
		if err := ensureBackports(); err != nil {
			return err
		}
		// Without -t the backports libvirt pulls dependencies that conflict with bookworm's.
		args = append(args, "-t", "bookworm-backports")
	}
	logf(cfg.Log, "installing %s", strings.Join(pkgs, " "))
	if err := run(ctx, "apt-get", "update", "-qq"); err != nil {
		return err
	}
	if err := run(ctx, "apt-get", append(args, pkgs...)...); err != nil {
		return err
	}
	if toolMajor(ctx, "libvirtd") < minLibvirtMajor || toolMajor(ctx, "qemu-system-x86_64") < minQemuMajor {
		return fmt.Errorf("testbed: need libvirt >= %d and QEMU >= %d after installing; got older ones", minLibvirtMajor, minQemuMajor)
	}
	return nil
}

// Debian 12's prometheus package: the e2e suite evaluates deploy/'s rules
// in a real server, and promtool checks and unit-tests them.
const minPrometheusMinor = 42

// Paths of the package that would register a system service: without them
// the package's maintainer scripts have nothing to start or enable (its
// postinst starts the service when the host's policy-rc.d allows it), so
// installing it never leaves a daemon scraping the host. The bed runs its
// own server, with its own configuration and data, only while it is up.
var prometheusServicePaths = []string{"/etc/init.d/prometheus", "/lib/systemd/system/prometheus.service", "/usr/lib/systemd/system/prometheus.service"}

func installPrometheus(ctx context.Context, cfg Config) error {
	if prometheusMinor(ctx, "prometheus") >= minPrometheusMinor && prometheusMinor(ctx, "promtool") >= minPrometheusMinor {
		return nil
	}
	logf(cfg.Log, "installing prometheus (binaries only, no service)")
	if err := run(ctx, "apt-get", "update", "-qq"); err != nil {
		return err
	}
	args := []string{"install", "-y", "-qq", "--no-install-recommends"}
	for _, p := range prometheusServicePaths {
		args = append(args, "-o", "Dpkg::Options::=--path-exclude="+p)
	}
	if err := run(ctx, "apt-get", append(args, "prometheus")...); err != nil {
		return err
	}
	if prometheusMinor(ctx, "prometheus") < minPrometheusMinor || prometheusMinor(ctx, "promtool") < minPrometheusMinor {
		return fmt.Errorf("testbed: need prometheus and promtool >= 2.%d after installing; got older ones", minPrometheusMinor)
	}
	return nil
}

// prometheusMinor is the 2.x minor version of prometheus or promtool, 0 if absent.
func prometheusMinor(ctx context.Context, tool string) int {
	out, err := exec.CommandContext(ctx, tool, "--version").CombinedOutput()
	if err != nil {
		return 0
	}
	m := versionRe.FindSubmatch(out)
	if m == nil || string(m[1]) != "2" {
		return 0
	}
	minor, _ := strconv.Atoi(string(m[2]))
	return minor
}

func ensureBackports() error {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append(files, "/etc/apt/sources.list")
	mirror := "http://deb.debian.org/debian"
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte("bookworm-backports")) {
			return nil
		}
		if m := regexp.MustCompile(`(?m)(?:^URIs:\s*|^deb\s+(?:\[[^]]*\]\s+)?)(\S+/debian)/?\s`).FindSubmatch(b); m != nil {
			mirror = string(m[1])
		}
	}
	src := fmt.Sprintf("Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n", mirror)
	return os.WriteFile("/etc/apt/sources.list.d/bookworm-backports.sources", []byte(src), 0o644)
}

// ensureQemuAccount: libvirt resolves its built-in QEMU user before reading
// qemu.conf, so it must exist even though the bed runs QEMU as root.
func ensureQemuAccount(ctx context.Context) error {
	if exec.CommandContext(ctx, "getent", "group", "libvirt-qemu").Run() != nil {
		if err := run(ctx, "groupadd", "--system", "libvirt-qemu"); err != nil {
			return err
		}
	}
	if exec.CommandContext(ctx, "getent", "passwd", "libvirt-qemu").Run() != nil {
		return run(ctx, "useradd", "--system", "--gid", "libvirt-qemu", "--no-create-home",
			"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "libvirt-qemu")
	}
	return nil
}

func osRelease(key string) string {
	b, _ := os.ReadFile("/etc/os-release")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && k == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// run executes a setup command, folding its output into the error.
func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
