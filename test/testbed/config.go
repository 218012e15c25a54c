package testbed

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
)

// Config says where the bed keeps its files and what it runs.
type Config struct {
	// Dir holds runtime state. Default $FERRY_TESTBED_DIR or /var/tmp/ferry-testbed.
	// It must stay short (unix socket paths) and must not be under a
	// directory the nodes remount privately (/run, /var/lib, /var/log, /var/cache).
	Dir string
	// CacheDir holds the guest kernel and initramfs. Default
	// $FERRY_TESTBED_CACHE or <repo root>/.cache/testbed.
	CacheDir string
	// FerrydBin is the ferryd binary to run on each node; empty runs none.
	FerrydBin string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Stacks names the libvirt and QEMU each node runs (stack.go), by
	// node; a node not named runs the host's. Default from
	// $FERRY_BED_STACKS ("newest", or "a=oldest,b=newest").
	Stacks map[string]string
}

const (
	defaultDir = "/var/tmp/ferry-testbed"
	modulePath = "github.com/ferry-vm/ferry"
)

// Directories each node mounts privately; anything the nodes must share with
// the root namespace cannot live below them.
var nodePrivateDirs = []string{"/run", "/var/run", "/var/lib", "/var/log", "/var/cache", "/etc/libvirt"}

// Paths are spliced into a shell script and libvirt config files unquoted-safe only.
var safePath = regexp.MustCompile(`^/[A-Za-z0-9._/+-]*$`)

func (c Config) resolve() (Config, error) {
	if c.Dir == "" {
		c.Dir = os.Getenv("FERRY_TESTBED_DIR")
	}
	if c.Dir == "" {
		c.Dir = defaultDir
	}
	if c.CacheDir == "" {
		c.CacheDir = os.Getenv("FERRY_TESTBED_CACHE")
	}
	if c.CacheDir == "" {
		root, err := RepoRoot()
		if err != nil {
			return c, fmt.Errorf("testbed: no CacheDir given and %v (set FERRY_TESTBED_CACHE)", err)
		}
		c.CacheDir = filepath.Join(root, ".cache", "testbed")
	}
	var err error
	if c.Dir, err = checkSharedPath("Dir", c.Dir); err != nil {
		return c, err
	}
	if c.CacheDir, err = checkSharedPath("CacheDir", c.CacheDir); err != nil {
		return c, err
	}
	// The longest socket path is a per-guest migration relay listener.
	if n := len(c.Dir) + len("/a/run/mig/") + maxGuestName + len("/libvirt.sock"); n > 107 {
		return c, fmt.Errorf("testbed: Dir %q is too long for unix socket paths (%d > 107 bytes)", c.Dir, n)
	}
	if c.FerrydBin != "" {
		if c.FerrydBin, err = checkSharedPath("FerrydBin", c.FerrydBin); err != nil {
			return c, err
		}
		if fi, err := os.Stat(c.FerrydBin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return c, fmt.Errorf("testbed: FerrydBin %q is not an executable file", c.FerrydBin)
		}
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Stacks == nil {
		if c.Stacks, err = parseStacks(os.Getenv("FERRY_BED_STACKS")); err != nil {
			return c, err
		}
	}
	return c, nil
}

func checkSharedPath(what, p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("testbed: %s %q: %v", what, p, err)
	}
	if !safePath.MatchString(abs) {
		return "", fmt.Errorf("testbed: %s %q: only letters, digits and ._/+- are allowed", what, abs)
	}
	for _, d := range nodePrivateDirs {
		if abs == d || strings.HasPrefix(abs, d+"/") {
			return "", fmt.Errorf("testbed: %s %q is under %s, which the nodes remount privately", what, abs, d)
		}
	}
	return abs, nil
}

// RepoRoot finds the Ferry checkout: first upwards from the working
// directory (go test runs in the package directory), then from this source
// file, which still exists when the binary was built from the checkout.
func RepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if isFerryModule(filepath.Join(dir, "go.mod")) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("cannot find the %s checkout from the working directory", modulePath)
}

func isFerryModule(gomod string) bool {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && f[1] == modulePath {
			return true
		}
	}
	return false
}

func logf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "testbed: "+format+"\n", args...)
}
