package drive

import (
	"errors"
	"strings"
	"testing"

	"github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/peer"
)

// The source's QEMU connects only where the target's proxy answered, on a
// port of its own: not where a target's answer would send it.
func TestDirectURIIsTheTargetsHostOnly(t *testing.T) {
	for uri, want := range map[string]string{
		"tcp://10.77.0.2:49152":          "",
		"tcp://[fd00::2]:49152":          "not on",
		"tcp://10.77.0.9:49152":          "not on 10.77.0.2",
		"tcp://10.77.0.2":                "no port",
		"tcp://10.77.0.2:22":             "no port",
		"unix:///run/x":                  "not tcp",
		"tcp://10.77.0.2:49152/x":        "not tcp",
		"tcp://user@10.77.0.2:49152":     "not tcp",
		"rdma://10.77.0.2:49152":         "not tcp",
		"tcp://10.77.0.2:49152?x=1":      "not tcp",
		"TCP://10.77.0.2:49152":          "not tcp",
		"tcp://10.77.0.2.evil.com:49152": "not on",
	} {
		got, err := directURI(uri, "10.77.0.2:9475")
		if err == nil && got != uri {
			t.Errorf("%s: rebuilt as %s", uri, got)
		}
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", uri, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error saying %q", uri, err, want)
		}
	}
}

func TestDirectRequestsAreCheckedBeforeAnything(t *testing.T) {
	base := MigrateRequest{Domain: "vm", Target: "10.77.0.2:9475", TargetNode: "b", DataPath: DataPathDirect}
	if err := validateMigrate(base); err != nil {
		t.Fatalf("a direct request: %v", err)
	}
	for name, c := range map[string]struct {
		edit func(*MigrateRequest)
		says string
	}{
		"no target node": {func(r *MigrateRequest) { r.TargetNode = "" }, "needs targetNode"},
		"post-copy":      {func(r *MigrateRequest) { r.PostCopy = true }, "post-copy"},
		"unknown path":   {func(r *MigrateRequest) { r.DataPath = "tunnel" }, `dataPath "tunnel"`},
		"target by name": {func(r *MigrateRequest) { r.Target = "node-b:9475" }, "IP address"},
	} {
		r := base
		c.edit(&r)
		if err := validateMigrate(r); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.says)
		}
	}
	flags, _ := migrateFlags(base)
	if flags&libvirt.MigrateTLS == 0 {
		t.Errorf("a direct migration's flags %#x lack TLS", uint32(flags))
	}
}

// The target takes QEMU's TLS flag with the direct path and only with it:
// a proxied migration under QEMU's TLS would fail in QEMU, and a direct
// one without it would send memory in the clear.
func TestTargetTakesTheTLSFlagOnlyWithTheDirectPath(t *testing.T) {
	in := &Target{}
	live := uint32(libvirt.MigrateLive)
	tls := live | uint32(libvirt.MigrateTLS)
	for name, c := range map[string]struct {
		direct  bool
		flags   uint32
		refused bool
	}{
		"proxied":                {false, live, false},
		"proxied under QEMU TLS": {false, tls, true},
		"direct":                 {true, tls, false},
		"direct in the clear":    {true, live, true},
	} {
		_, _, err := in.check(peer.IncomingMigration{Domain: "vm", Flags: c.flags, Direct: c.direct}, "<domain")
		var r *peer.Refusal
		flagsRefused := errors.As(err, &r) && r.Reason == "flags_not_allowed"
		if flagsRefused != c.refused {
			t.Errorf("%s: %v, want flags refused %v", name, err, c.refused)
		}
	}
}
