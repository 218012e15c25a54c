//go:build testbed_live

package testbed

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// TestLive exercises the bed itself end to end, without ferryd (the e2e
// suite covers it with): go test -tags testbed_live ./test/testbed/ as root.
func TestLive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b := liveBed(ctx, t)

	for _, g := range []GuestSpec{
		{Name: "live1", Node: "a", MemoryMiB: 512, DirtyMiB: 256, DirtyRateMiBs: 64},
		{Name: "live2", Node: "a", MemoryMiB: 256, DirtyMiB: 128, DirtyRateMiBs: -1},
		{Name: "live3", Node: "b", MemoryMiB: 256, DirtyMiB: 128, DirtyRateMiBs: 16},
	} {
		if err := b.StartGuest(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	// Overlapping migrations in both directions need distinct relay ports and sockets.
	var wg sync.WaitGroup
	for _, m := range []MigrateSpec{
		{Name: "live1", From: "a", To: "b"},
		{Name: "live2", From: "a", To: "b"},
		{Name: "live3", From: "b", To: "a"},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.Migrate(ctx, m); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	wantState(t, b, "b", "live1", libvirt.DomainRunning)
	wantState(t, b, "a", "live3", libvirt.DomainRunning)
	// As on a stock host: QEMU is not root, so it read the root-only
	// kernel because libvirt handed it over, and reached the relays'
	// sockets because they were given to its group.
	if c, err := b.QEMUCreds("b", "live1"); err != nil || c.UID == 0 || c.GID == 0 {
		t.Errorf("QEMU of live1 on b runs as %+v (%v), want a user of its own, not root", c, err)
	}

	if err := b.Migrate(ctx, MigrateSpec{Name: "live1", From: "b", To: "a", PostCopyAfter: time.Second}); err != nil {
		t.Fatal(err)
	}
	before := len(consoleRates(t, b, "live1"))
	time.Sleep(2500 * time.Millisecond)
	if after := len(consoleRates(t, b, "live1")); after < before+2 {
		t.Errorf("live1 stopped reporting after migrating back: %d -> %d rate lines", before, after)
	}

	if err := b.RestartLibvirtd(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, "a", "live1", libvirt.DomainRunning)

	// A post-copy migration broken by a reset leaves both halves in post-copy-failed states.
	if err := b.DestroyGuest("live2"); err != nil {
		t.Fatal(err)
	}
	if err := b.StartGuest(ctx, GuestSpec{Name: "live2", Node: "a", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		errc <- b.Migrate(ctx, MigrateSpec{Name: "live2", From: "a", To: "b", PostCopyAfter: 2 * time.Second, PostCopyBandwidthMiBs: 32})
	}()
	time.Sleep(3 * time.Second)
	if err := b.ResetMigration(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Error("migration survived ResetMigration")
	}
	wantStateReason(t, b, "a", "live2", libvirt.DomainPaused, int32(libvirt.DomainPausedPostcopyFailed))
	wantStateReason(t, b, "b", "live2", libvirt.DomainRunning, int32(libvirt.DomainRunningPostcopyFailed))
	if err := b.DestroyGuest("live2"); err != nil {
		t.Error(err)
	}

	if err := b.CutLink(); err != nil {
		t.Fatal(err)
	}
	if out, err := b.Exec(ctx, "a", "ip", "route").Output(); err != nil || strings.Contains(string(out), "10.77.0.0/24") {
		t.Errorf("route still up after CutLink: %q %v", out, err)
	}
	if err := b.RestoreLink(); err != nil {
		t.Fatal(err)
	}
	if err := b.Migrate(ctx, MigrateSpec{Name: "live3", From: "a", To: "b"}); err != nil {
		t.Errorf("migration after RestoreLink: %v", err)
	}
}

func consoleRates(t *testing.T, b *Bed, name string) []float64 {
	out, err := b.Console(name)
	if err != nil {
		t.Fatal(err)
	}
	return ParseRates(out)
}

func wantState(t *testing.T, b *Bed, node, name string, want libvirt.DomainState) {
	t.Helper()
	wantStateReason(t, b, node, name, want, -1)
}

func wantStateReason(t *testing.T, b *Bed, node, name string, want libvirt.DomainState, reason int32) {
	t.Helper()
	l, err := b.Libvirt(node)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	dom, err := l.DomainLookupByName(name)
	if err != nil {
		t.Fatalf("%s on %s: %v", name, node, err)
	}
	st, rs, err := l.DomainGetState(dom, 0)
	if err != nil || st != int32(want) || (reason >= 0 && rs != reason) {
		t.Errorf("%s on %s: state %d/%d (%v), want %d/%d", name, node, st, rs, err, want, reason)
	}
}

// liveBed brings a bed up for one test and down after it.
func liveBed(ctx context.Context, t *testing.T) *Bed {
	t.Helper()
	cfg := Config{Log: testWriter{t}}
	if err := Prepare(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	b, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Down(); err != nil {
			t.Error(err)
		}
	})
	return b
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
