// Package testbed runs two libvirt "nodes" on one Linux host for Ferry's
// end-to-end tests. Each node is a libvirtd (and optionally a ferryd) in its
// own network and private mount namespace; the nodes are joined by a veth
// pair (ferry-a/fa 10.77.0.1, ferry-b/fb 10.77.0.2). Guests are a small
// Debian kernel plus test/guest as /init, which dirties memory at a chosen
// rate and reports it on the serial console. Migrations go peer-to-peer
// through per-migration unix<->TCP relays, the way KubeVirt does it.
//
// Everything needs root. Typical use from a test:
//
//	cfg := testbed.Config{FerrydBin: ferryd, Log: os.Stderr}
//	if err := testbed.Prepare(ctx, cfg); err != nil { ... }
//	bed, err := testbed.Up(ctx, cfg)
//	defer bed.Down()
//	bed.StartGuest(ctx, testbed.GuestSpec{Name: "vm1", Node: "a", MemoryMiB: 512, DirtyMiB: 256, DirtyRateMiBs: 64})
//	bed.Migrate(ctx, testbed.MigrateSpec{Name: "vm1", From: "a", To: "b"})
//
// The same operations are available from a shell through
// test/testbed/cmd/testbed; `testbed up` leaves the bed running and the
// other verbs attach to it through the state files in Config.Dir.
//
// Layout of Config.Dir: state.json (PIDs of holders, libvirtd, ferryd),
// relays/<guest>.json (relay PIDs and ports of in-flight migrations),
// guests/<guest>.json (console history), and per node <node>/ with etc, run,
// lib, log, cache (mounted over /etc/libvirt, /run, /var/{lib,log,cache}/libvirt
// inside the node), kubelet (the node's /var/lib/kubelet, where virt-launcher
// pods live: see StartLauncher); lib/images holds the guests' kernel and initrd, as
// /var/lib/libvirt/images), kvm (a stock root:kvm 0660 /dev/kvm when the
// host's is not), sock (ferry.sock; libvirtd's socket is run/libvirt/libvirt-sock,
// its /run/libvirt/libvirt-sock) and the logs
// libvirtd.log, libvirtd.out, ferryd.log, holder.log. A guest's console is
// <node>/run/consoles/console-<guest>.log. Down keeps the files for post-mortems;
// the next Up removes all but the QEMU capabilities cache.
package testbed
