package libvirtx

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// MigrateTLS is how libvirt's QEMU driver sets up a migration under QEMU's
// own TLS (VIR_MIGRATE_TLS): the directory of QEMU's certificates, and
// whether the target QEMU checks the source's client certificate.
type MigrateTLS struct {
	Dir    string
	Verify bool
}

// libvirt's built-in defaults (qemu.conf's comments, qemu_conf.c).
const (
	defaultTLSDir   = "/etc/pki/qemu"
	migrateTLSDir   = "/etc/pki/libvirt-migrate"
	qemuConfMaxSize = 1 << 20
)

// ReadMigrateTLS reads path (a qemu.conf) as libvirt does for migration:
// migrate_tls_x509_cert_dir, else /etc/pki/libvirt-migrate where it
// exists, else default_tls_x509_cert_dir (/etc/pki/qemu);
// migrate_tls_x509_verify, else default_tls_x509_verify, else on.
func ReadMigrateTLS(path string) (MigrateTLS, error) {
	f, err := os.Open(path)
	if err != nil {
		return MigrateTLS{}, err
	}
	defer f.Close()
	vals := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), qemuConfMaxSize)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			continue // a list's continuation line
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "migrate_tls_x509_cert_dir", "default_tls_x509_cert_dir", "migrate_tls_x509_verify", "default_tls_x509_verify":
		default:
			continue
		}
		if _, seen := vals[key]; seen {
			continue // libvirt takes a name's first value
		}
		if q := val[:min(len(val), 1)]; q == `"` || q == "'" {
			end := strings.Index(val[1:], q)
			if strings.HasPrefix(val, `"""`) || end < 0 {
				return MigrateTLS{}, fmt.Errorf("%s:%d: %s is not a one-line quoted string, which is all ferryd reads", path, n, key)
			}
			val, line = val[1:end+1], val[end+2:]
		} else if i := strings.IndexAny(val, " \t#;"); i >= 0 {
			val, line = val[:i], val[i:]
		} else {
			line = ""
		}
		if rest := strings.TrimSpace(line); rest != "" && !strings.HasPrefix(rest, "#") {
			return MigrateTLS{}, fmt.Errorf("%s:%d: more follows %s on its line (%q), which ferryd does not read", path, n, key, rest)
		}
		vals[key] = val
	}
	if err := sc.Err(); err != nil {
		return MigrateTLS{}, fmt.Errorf("%s: %w", path, err)
	}
	m := MigrateTLS{Dir: vals["migrate_tls_x509_cert_dir"], Verify: true}
	if m.Dir == "" {
		if _, err := os.Stat(migrateTLSDir); err == nil {
			m.Dir = migrateTLSDir
		} else if m.Dir = vals["default_tls_x509_cert_dir"]; m.Dir == "" {
			m.Dir = defaultTLSDir
		}
	}
	for _, k := range []string{"migrate_tls_x509_verify", "default_tls_x509_verify"} {
		if v, ok := vals[k]; ok {
			i, err := strconv.Atoi(v)
			if err != nil {
				return MigrateTLS{}, fmt.Errorf("%s: %s = %q is not a number", path, k, v)
			}
			m.Verify = i != 0
			break
		}
	}
	return m, nil
}
