package drive

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
)

func TestChooseDataCompressesWhereTheLinkLimits(t *testing.T) {
	const mib = 1 << 20
	slow := dataEvidence{Link: 30 * mib, LinkFrom: "its cap", Dirty: 40 * mib, DirtyKnown: true, SpareCPUs: 3.5}
	cases := []struct {
		name     string
		e        dataEvidence
		want     string
		parallel int
		why      string
	}{
		{"slow link, dirtying faster than it", slow, CompressionZstd, 3, "every byte of speed"},
		{"slow link, dirtying little", func() dataEvidence { e := slow; e.Dirty = 2 * mib; return e }(), CompressionZstd, 1, "one keeps up"},
		{"channels bounded", func() dataEvidence { e := slow; e.SpareCPUs = 15; return e }(), CompressionZstd, maxDataChannels, "zstd on 4"},
		{"post-copy allowed", func() dataEvidence { e := slow; e.PostCopy = true; return e }(), CompressionNone, 0, "post-copy"},
		{"no CPU to spare", func() dataEvidence { e := slow; e.SpareCPUs = 0.6; return e }(), CompressionNone, 0, "0.6 idle CPUs"},
		{"fast link", func() dataEvidence { e := slow; e.Link = 1 << 30; return e }(), CompressionNone, 0, "faster than zstd keeps up"},
		{"link unknown", func() dataEvidence { e := slow; e.Link = 0; return e }(), CompressionNone, 0, "unknown"},
		{"dirty rate unmeasured", func() dataEvidence { e := slow; e.DirtyKnown, e.Dirty = false, 0; return e }(), CompressionZstd, 1, "not measured"},
	}
	for _, c := range cases {
		got := chooseData(c.e)
		if got.Compression != c.want || got.Parallel != c.parallel || !strings.Contains(got.Why, c.why) {
			t.Errorf("%s: %+v, want %s on %d channels, saying %q", c.name, got, c.want, c.parallel, c.why)
		}
	}
}

func TestPathRateIsTheCapElseWhatAnUnheldWireSustained(t *testing.T) {
	now := time.Now()
	capped := pastMigration("b", now, 500)
	capped.Proxy.CapMiBs = 48
	zstd := pastMigration("b", now, 700)
	zstd.Proxy.Compression = "zstd"
	jobs := []api.Job{pastMigration("b", now, 90), pastMigration("b", now, 120), pastMigration("c", now, 500), capped, zstd}
	if r, from := pathRate(jobs, "b", 30); r != 30<<20 || from != "its cap" {
		t.Errorf("capped: %d (%s)", r, from)
	}
	if r, _ := pathRate(jobs, "b", 0); r != 120<<20 {
		t.Errorf("uncapped: %d, want the most an uncapped, uncompressed migration to b sustained", r)
	}
	if r, _ := pathRate(jobs, "d", 0); r != 0 {
		t.Errorf("an unknown path: %d", r)
	}
}

func TestSpareCPUsReadsTheHost(t *testing.T) {
	got, err := spareCPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tk, err := cpuTicks()
	if err != nil {
		t.Fatal(err)
	}
	if got < 0 || got > float64(tk.cpus) {
		t.Errorf("%.2f idle CPUs of %d", got, tk.cpus)
	}
}

func TestCompressionIsCheckedUpFront(t *testing.T) {
	base := MigrateRequest{Domain: "vm", Target: "10.0.0.2:9475"}
	for _, c := range []struct {
		mod  func(*MigrateRequest)
		want string
	}{
		{func(r *MigrateRequest) { r.Compression = "lz4" }, `compression "lz4" is not none, zstd or auto`},
		{func(r *MigrateRequest) { r.Compression = "zstd" }, "needs parallel 1 or more"},
	} {
		r := base
		c.mod(&r)
		if err := validateMigrate(r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", r, err, c.want)
		}
	}
	ok := base
	ok.Compression, ok.Parallel = "zstd", 2
	if err := validateMigrate(ok); err != nil {
		t.Errorf("zstd on 2 channels: %v", err)
	}
	withPostCopy := ok
	withPostCopy.PostCopy = true
	if err := validateMigrate(withPostCopy); err == nil || !strings.Contains(err.Error(), "cannot be had with post-copy") {
		t.Errorf("zstd on 2 channels with post-copy: %v; want it refused", err)
	}
	flags, params := migrateFlags(ok)
	if flags&libvirt.MigrateCompressed == 0 || !slices.ContainsFunc(params, func(p libvirt.TypedParam) bool {
		return p.Field == libvirt.MigrateParamCompression && p.Value.I == CompressionZstd
	}) {
		t.Errorf("zstd asked, libvirt gets flags %#x and %v", flags, params)
	}
}
