package main

import "github.com/ferry-vm/ferry/daemon"

// flagDetails is what there is to know of a flag beyond its one line of
// help: defaults explained, limits, cautions, how it bears on other flags.
// Markdown, written into docs/flags.md under the flag's heading; --help
// does not print it, so it lives with the generator, not in ferryd.
var flagDetails = map[string]string{
	"allow-auto-converge": "Auto-converge throttles the guest's vCPUs until pre-copy converges. The policy waits while the throttle is still rising.",

	"postcopy-resume": "`libvirt`: by libvirt's own resume protocol (`VIR_MIGRATE_POSTCOPY_RESUME`, as `virsh migrate --postcopy-resume`) through Ferry's proxy, wherever the target's libvirt does not crash on it; a target running libvirt 11.2 or 11.3, whose daemon crashed there until 11.4, gives its QEMU a QMP monitor of Ferry's instead and resumes through it. `monitor`: every target QEMU of a post-copy gets Ferry's monitor, which libvirt reports as a `custom-monitor` taint and keeps in the guest's live XML. Read on the source only, which says it at each prepare (never from a libvirt 11.2 or 11.3 of its own); the target chooses from it and its own libvirt, whatever its own flag says. See [driving.md](driving.md#post-copy-that-breaks-is-resumed).",

	"allow-postcopy": "Under `--policy act`, the migrations Ferry drives are then started with post-copy enabled.",

	"bandwidth-per-migration-mibs": "The cap of each migration Ferry drives that names none of its own.",

	"completion-timeout-per-gib": "For migrations Ferry does not drive (those it drives have their own deadline): past it, the policy switches the migration to post-copy if allowed (`--allow-postcopy`), else aborts it.",

	"debug-socket-mode": "Whoever may connect may also act on every migration (abort, switch, give up, resolve), so widen it only for those who may.",

	"direct-peers": "The direct path (`ferryctl migrate --data-path direct`) is QEMU straight to QEMU under QEMU's own TLS, no relay. Both nodes must list each other, and the certificates in `--qemu-tls-dir` must come from the proxy's CA. It is for trusted migration networks on plain libvirt hosts: see [proxy.md](proxy.md#the-direct-path).",

	"dirty-rate-period": "QEMU measures it (`virDomainStartDirtyRateCalc`), never while the domain migrates; the plans and checks predict from it.",

	"inbound-migrations": "A source asking for more waits its turn.",

	"kubeconfig": "Empty uses the in-cluster service account if there is one, else ferryd runs without Kubernetes.",

	"kubelet-pods-dir": "The DaemonSet mounts it at `/pods`, as virt-handler does. When it exists, KubeVirt's launcher sockets are looked for there (`DIR/*/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock`, the default of `--libvirt-socket-glob`), and a socket under it names its launcher pod.",

	"kubelet-root": "ferryd warns that it is deprecated, and sets `--kubelet-pods-dir` to `ROOT/pods`. Given with `--kubelet-pods-dir` (or `FERRY_KUBELET_PODS_DIR`), ferryd does not start.",

	"libvirt-socket": "At any path length. A socket not owned by root is a session daemon's (a virt-launcher's), asked for `qemu:///session`. Default: `" + daemon.DefaultLibvirtSocket + "`, when no `--libvirt-socket-glob` is set and `--kubelet-pods-dir` does not exist.",

	"libvirt-socket-glob": "Followed with inotify (200ms after a burst of changes) and re-read every 5s; under KubeVirt it matches one socket per virt-launcher pod. Default: KubeVirt's launcher sockets in `--kubelet-pods-dir`, when that directory exists.",

	"max-downtime-ms": "In milliseconds, as KubeVirt's `maxDowntimeMs`.",

	"migration-adopt-defined": "The guest held defined and shut off on this node has its definition replaced by the peer's. Refused by default: a peer that knows a shut-off guest's name and UUID would run its own memory on that guest's disks. It is for guests left defined here by `virsh migrate --persistent` without `--undefinesource`, or defined on every node.",

	"migration-allow-any-target": "Such a migration goes to a proxy address without naming the target's node (`targetNode`, `ferryctl migrate --to-node`). A plain-TCP proxy (`--proxy-tls=false`), or certificates that name no node, need it.",

	"migration-allowed-bridge": "Default none: a migrated guest's NICs use libvirt networks only.",

	"migration-allowed-console-dir": "A directory of guests' console and chardev log files only: the one place an incoming migration's file serial, console, channel or chardev `<log>` may write, and QEMU creates or truncates the file at Prepare. Default none: file chardevs are refused.",

	"migration-allowed-network": "A libvirt network of this node. Default none: a network can pass host devices or macvtap a host NIC, so none is taken unless named.",

	"migration-allowed-path": "The directory under which an incoming migration's domain XML may name local files (disks, kernel, nvram...). Default none: keep it as narrow as the guests' files.",

	"migration-bandwidth-mibs": "The migrations Ferry drives share it, the one nearest its switch-over getting the most. 0: not shared out, and plans learn it from the last migrations.",

	"migration-interface": "Its first global unicast address is the proxy's (else `--node-ip`), and its link going down is recorded on the jobs in flight.",

	"outbound-migrations": "More wait their turn.",

	"peer": "`HOST:PORT` is its proxy's address; `NODE` is the name `ferryctl evacuate --to` and `ferryctl plan --to` take.",

	"pod-name": "Used when this ferryd's proxy certificate names its pod (`spiffe://PEER-NAME/ns/NAMESPACE/pod/POD`).",

	"pod-namespace": "A peer's certificate that names a ferryd pod is looked up there for that pod's node.",

	"policy": "`observe` gives verdicts only; `advise` decides and shows, changing nothing; `act` steers: it raises the downtime to a switch-over within `--max-downtime-ms`, else switches to post-copy if allowed (`--allow-postcopy`), else aborts. See [policy.md](policy.md#the-convergence-policy).",

	"policy-scope": "`driven`: the migrations Ferry drives; others are advised, and their starter runs its own monitor. `all`: every migration.",

	"postcopy-recovery-timeout": "A post-copy migration Ferry drives whose streams broke stays paused on both nodes until it is resumed over fresh streams, once the path back is there (the link, the peer's proxy, a restarted ferryd). Past this time it is overdue and alerts ([FerryPostCopyRecoveryOverdue](operations.md#ferrypostcopyrecoveryoverdue)); Ferry goes on trying after that, until it resumes or an operator gives up (`ferryctl give-up`). 0 to 24h. 0 resumes nothing: a broken post-copy is declared lost at once, and its targets then give their QEMU no monitor of Ferry's. On a target it is the most it waits before showing the migration overdue; the source decides whether to resume it.",

	"proxy-first-stream-wait": "The source shows up by its first stream through the proxy or, on the direct path, by an open connection to the target's QEMU (looked at again while only other addresses than the source's are connected). Past it the migration is dropped and its target QEMU stopped.",

	"proxy-listen": "`:PORT` listens on the migration network's address; e.g. `:9475`. Empty, the default, leaves the proxy off, and ferryd only observes. With `--proxy-tls`, ferryd does not start without its `--proxy-tls-*` certificates, and names the missing file.",

	"proxy-socket-dir": "On a source, the sockets its QEMU connects to; on a target, those its QEMU listens on. See [proxy.md](proxy.md#sockets-and-qemus-user).",

	"proxy-tls": "`false` relays plain TCP with zero-copy splice: for a trusted migration network only.",

	"proxy-tls-identity-form": "`pod` is `spiffe://PEER-NAME/ns/NS/pod/POD`, placed on a node by the API server; `node` is `spiffe://PEER-NAME/node/NODE`. With `pod`, a certificate naming a node outright, which no API server vouches for, is refused.",

	"proxy-tls-peer-name": "Also the trust domain of a certificate's `spiffe://` node identity.",

	"proxy-tls-require-node-identity": "A certificate names its node by a URI SAN, `spiffe://PEER-NAME/node/NODE`, or `spiffe://PEER-NAME/ns/NS/pod/POD` for a ferryd pod. This node's own certificate must name it too. Needs `--proxy-tls`.",

	"qemu-conf": "Read for the directory of QEMU's migration certificates, and whether QEMU checks a source's certificate.",

	"qemu-group": "The proxy's socket directory is given to this group so QEMU can create and reach its migration sockets. Default: ask the node's libvirt (its DAC base label, e.g. `libvirt-qemu` on Debian), which needs a fixed libvirt socket (`--libvirt-socket`, or the system libvirtd's by default): with a glob alone, set this flag.",

	"qemu-tls-dir": "Set it where ferryd does not see that directory at the path qemu.conf gives (`--qemu-conf`). It holds `ca-cert.pem` and the server and client pairs QEMU uses on the direct path, checked at start and before every direct migration.",

	"sample-interval": "They are also sampled at once on each migration iteration. A socket with no job in flight has its domains' jobs read every sixth interval and is listed every sixtieth; its libvirt events (a migration's first pass, an incoming one's start) wake it at once. A migration that fails within six intervals of its start, before its first pass, may leave no job.",

	"shutdown-grace": "New migrations are refused meanwhile; past it, those still in flight are cut. 0 cuts them at once. A pod's `terminationGracePeriodSeconds` must be larger than it by 20s or more: see [operations.md](operations.md#stopping-ferryd).",

	"state-dir": "VMI marks waiting for the API server, and the migrations Ferry drives, their prepares and recorded post-copy failures.",
}
