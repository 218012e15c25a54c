//go:build e2e

package e2e

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/test/testbed"
)

// checkDirtyRate holds the rate ferryd gives a guest (the median of its
// last five measurements by QEMU) to the rate the guest itself prints,
// within 25 %, and to what /metrics serves.
func checkDirtyRate(t *testing.T, name string, asked int) {
	t.Helper()
	var got api.Domain
	waitFor(t, name+"'s dirty rate measured five times", 2*time.Minute, func() bool {
		resp, err := ferryOn("a").domains(false)
		if err != nil {
			return false
		}
		i := slices.IndexFunc(resp.Domains, func(d api.Domain) bool { return d.Name == name })
		if i < 0 || len(resp.Domains[i].DirtyRates) < 5 {
			return false
		}
		got = resp.Domains[i]
		return true
	})
	console, err := bed.Console(name)
	if err != nil {
		t.Fatal(err)
	}
	printed := testbed.ParseRates(console)
	if len(printed) < 10 {
		t.Fatalf("%s printed %d rates", name, len(printed))
	}
	// The guest's own figure over its last seconds, each second's rate as
	// it printed it.
	own := migration.Median(printed[len(printed)-10:])
	measured := float64(got.DirtyBytesPerSecond) / (1 << 20)
	var each []string
	for _, m := range got.DirtyRates {
		each = append(each, fmt.Sprintf("%.0f", float64(m.BytesPerSecond)/(1<<20)))
	}
	t.Logf("%s: asked %d MiB/s, the guest printed %.1f, ferryd gives %.1f MiB/s from QEMU's %s measurements of %ds: %s",
		name, asked, own, measured, got.DirtyRates[0].Mode, got.DirtyRates[0].PeriodSeconds, strings.Join(each, " "))
	if math.Abs(measured-own) > 0.25*own {
		t.Errorf("%s: measured %.1f MiB/s, the guest printed %.1f: more than 25 %% apart", name, measured, own)
	}
	if v, ok := ferryOn("a").metric("ferry_domain_dirty_rate_bytes_per_second", `domain="`+name+`"`); !ok || v <= 0 {
		t.Errorf("ferry_domain_dirty_rate_bytes_per_second for %s: %v (present %v)", name, v, ok)
	}
}
