package testbed

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func kernelPath(cacheDir string) string { return filepath.Join(cacheDir, "vmlinuz") }

// ensureKernel takes vmlinuz out of Debian's cloud kernel package without
// installing it: small, boots fast under TCG, serial console built in.
func ensureKernel(ctx context.Context, cfg Config) error {
	dst := kernelPath(cfg.CacheDir)
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	pkg, err := cloudKernelPackage(ctx)
	if err != nil {
		// Images often ship without package lists.
		if err := run(ctx, "apt-get", "update", "-qq"); err != nil {
			return err
		}
		if pkg, err = cloudKernelPackage(ctx); err != nil {
			return err
		}
	}
	logf(cfg.Log, "downloading guest kernel %s", pkg)
	tmp, err := os.MkdirTemp(cfg.CacheDir, "kernel-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dl := exec.CommandContext(ctx, "apt-get", "download", "-qq", "-o", "APT::Sandbox::User=root", pkg)
	dl.Dir = tmp
	if out, err := dl.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s: %v: %s", pkg, err, strings.TrimSpace(string(out)))
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download %s: expected one .deb in %s, found %d", pkg, tmp, len(debs))
	}
	if err := extractVmlinuz(ctx, debs[0], dst+".tmp"); err != nil {
		return err
	}
	if err := os.WriteFile(dst+".package", []byte(pkg+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}

// cloudKernelPackage resolves the meta package to the versioned image package.
func cloudKernelPackage(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", "linux-image-cloud-amd64").Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends linux-image-cloud-amd64: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
			return f[1], nil
		}
	}
	return "", errors.New("apt-cache depends linux-image-cloud-amd64: no linux-image dependency")
}

func extractVmlinuz(ctx context.Context, deb, dst string) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Wait()
	tr := tar.NewReader(stdout)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return fmt.Errorf("%s has no boot/vmlinuz-*", deb)
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", deb, err)
		}
		if strings.HasPrefix(strings.TrimPrefix(h.Name, "./"), "boot/vmlinuz-") && h.Typeflag == tar.TypeReg {
			f, err := os.Create(dst)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			_, _ = io.Copy(io.Discard, stdout)
			return err
		}
	}
}
