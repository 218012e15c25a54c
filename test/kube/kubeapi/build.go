package kubeapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

const (
	apiserverModule = "test/kube/apiserver"
	binDir          = "test/kube/bin"
)

// Build builds etcd and kube-apiserver into test/kube/bin unless both are newer than the
// apiserver module's go.mod and go.sum, and returns their paths. Build output goes to log.
func Build(ctx context.Context, log io.Writer) (etcd, apiserver string, err error) {
	if log == nil {
		log = io.Discard
	}
	root, err := RepoRoot()
	if err != nil {
		return "", "", err
	}
	modDir := filepath.Join(root, apiserverModule)
	bin := filepath.Join(root, binDir)
	etcd = filepath.Join(bin, "etcd")
	apiserver = filepath.Join(bin, "kube-apiserver")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", "", err
	}

	// Parallel test binaries (one per package under test/kube) must not build at once:
	// two cold builds on 2 cores take twice as long and may rename over each other.
	unlock, err := lockFile(filepath.Join(bin, ".build.lock"))
	if err != nil {
		return "", "", err
	}
	defer unlock()

	modTime, err := newestModTime(filepath.Join(modDir, "go.mod"), filepath.Join(modDir, "go.sum"))
	if err != nil {
		return "", "", err
	}
	kubeVersion, err := requiredVersion(filepath.Join(modDir, "go.mod"), "k8s.io/kubernetes")
	if err != nil {
		return "", "", err
	}
	major, minor, ok := majorMinor(kubeVersion)
	if !ok {
		return "", "", fmt.Errorf("%s: cannot parse k8s.io/kubernetes version %q", modDir, kubeVersion)
	}
	// Without these the binary reports v0.0.0-master, which confuses anything that
	// checks the server version.
	versionPkg := "k8s.io/component-base/version"
	ldflags := fmt.Sprintf("-X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=%[3]s -X %[1]s.gitMinor=%[4]s",
		versionPkg, kubeVersion, major, minor)

	for _, b := range []struct{ out, pkg, ldflags string }{
		{etcd, "go.etcd.io/etcd/server/v3", ""},
		{apiserver, "k8s.io/kubernetes/cmd/kube-apiserver", ldflags},
	} {
		if fi, err := os.Stat(b.out); err == nil && fi.ModTime().After(modTime) {
			continue
		}
		fmt.Fprintf(log, "kubeapi: building %s (minutes on a cold build cache)\n", b.pkg)
		// Build to a temporary name: a reader must never exec a half-written binary.
		tmp := b.out + ".tmp"
		// -trimpath keeps the cache key independent of where the repo is checked out.
		args := []string{"build", "-trimpath", "-o", tmp}
		if b.ldflags != "" {
			args = append(args, "-ldflags", b.ldflags)
		}
		cmd := exec.CommandContext(ctx, "go", append(args, b.pkg)...)
		cmd.Dir = modDir
		// A developer's go.work would otherwise pull this module into a workspace with
		// Ferry's and resolve k8s.io versions across both.
		cmd.Env = append(os.Environ(), "GOWORK=off")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			os.Remove(tmp)
			return "", "", fmt.Errorf("go build %s: %w", b.pkg, err)
		}
		if err := os.Rename(tmp, b.out); err != nil {
			return "", "", err
		}
	}
	return etcd, apiserver, nil
}

// RepoRoot returns the root of the Ferry checkout this package belongs to.
func RepoRoot() (string, error) {
	// Found through the source file's location when the test binary was built without
	// -trimpath, else through git from the working directory (go test runs in the
	// package directory).
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		root := filepath.Join(filepath.Dir(file), "..", "..", "..")
		if isRepoRoot(root) {
			return filepath.Clean(root), nil
		}
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("cannot find the Ferry repository root: git rev-parse: %w", err)
	}
	root := strings.TrimSpace(string(out))
	if !isRepoRoot(root) {
		return "", fmt.Errorf("cannot find the Ferry repository root: %s has no %s/go.mod", root, apiserverModule)
	}
	return root, nil
}

func isRepoRoot(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, apiserverModule, "go.mod"))
	return err == nil
}

func newestModTime(paths ...string) (time.Time, error) {
	var t time.Time
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return t, err
		}
		if fi.ModTime().After(t) {
			t = fi.ModTime()
		}
	}
	return t, nil
}

// requiredVersion reads the version of module mod from a go.mod's require lines.
func requiredVersion(gomod, mod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(f) >= 2 && f[0] == mod {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s does not require %s", gomod, mod)
}

// majorMinor splits "v1.37.2" into "1" and "37".
func majorMinor(v string) (major, minor string, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
