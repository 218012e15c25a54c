package testbed

import (
	"bytes"
	"compress/gzip"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestParseRates(t *testing.T) {
	console := "[    0.009] ACPI BIOS Error\r\n" +
		"DIRTIER: touched 256 MiB in 0.86s, target 64 MiB/s READY\r\n" +
		"DIRTIER: t=1s rate=63.7 MiB/s total=63 MiB\r\n" +
		"DIRTIER: t=2s rate=0.0 MiB/s total=63 MiB\r\n" +
		"DIRTIER: t=3s rate=34178.9 MiB/s total=269675 MiB"
	got := ParseRates(console)
	want := []float64{63.7, 0, 34178.9}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseRates = %v, want %v", got, want)
	}
}

func TestResolveRejectsNodePrivateDirs(t *testing.T) {
	for _, dir := range []string{"/run/ferry", "/var/lib/ferry", "/var/cache/x", "/tmp/has space"} {
		if _, err := (Config{Dir: dir, CacheDir: "/tmp/c"}).resolve(); err == nil {
			t.Errorf("Dir %q accepted", dir)
		}
	}
	if _, err := (Config{Dir: "/tmp/" + strings.Repeat("x", 60), CacheDir: "/tmp/c"}).resolve(); err == nil {
		t.Error("Dir too long for socket paths accepted")
	}
	if _, err := (Config{Dir: "/var/tmp/ferry-testbed", CacheDir: "/tmp/c"}).resolve(); err != nil {
		t.Errorf("default Dir rejected: %v", err)
	}
}

// TestInitramfsLayout reads the newc archive back: entry names, modes and
// the init payload must survive the padding rules.
func TestInitramfsLayout(t *testing.T) {
	var buf bytes.Buffer
	init := []byte("#!fake init, odd length")
	if err := writeInitramfs(&buf, init); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(zr)
	field := func(h []byte, i int) int {
		v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
		if err != nil {
			t.Fatal(err)
		}
		return int(v)
	}
	align := func(n int) int { return (n + 3) &^ 3 }
	modes := map[string]int{}
	var payload []byte
	for off := 0; ; {
		h := raw[off : off+110]
		if string(h[:6]) != "070701" {
			t.Fatalf("bad magic at %d", off)
		}
		nameLen, size := field(h, 11), field(h, 6)
		name := string(raw[off+110 : off+110+nameLen-1])
		data := align(off + 110 + nameLen)
		if name == "TRAILER!!!" {
			break
		}
		modes[name] = field(h, 1)
		if name == "init" {
			payload = raw[data : data+size]
		}
		off = align(data + size)
	}
	want := map[string]int{"dev": 0o040755, "proc": 0o040755, "dev/console": 0o020600, "init": 0o100755}
	if !reflect.DeepEqual(modes, want) {
		t.Errorf("entries = %v, want %v", modes, want)
	}
	if !bytes.Equal(payload, init) {
		t.Errorf("init payload = %q", payload)
	}
}

func TestNodeFlagsNamingSocketsReplaceTheNodeSocket(t *testing.T) {
	for args, want := range map[string]bool{
		"--libvirt-socket-glob /x/*/sock": true,
		"--libvirt-socket=/x/sock":        true,
		"-libvirt-socket /x/sock":         true,
		"--sample-interval 30s":           false,
		"--log-level debug":               false,
		"":                                false,
	} {
		if got := namesLibvirtSockets(strings.Fields(args)); got != want {
			t.Errorf("namesLibvirtSockets(%q) = %v, want %v", args, got, want)
		}
	}
}
