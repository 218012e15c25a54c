package libvirtx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferry-vm/ferry/internal/testenv"
)

// guestXML is a domain as libvirt's Begin gives it, with devices spliced in.
func guestXML(name, extraTop, devices string) string {
	return `<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>` + name + `</name>
  <uuid>7c3a2c5e-2b36-4a7b-9d8e-0a4c1b2e3f40</uuid>
  <metadata><app:info xmlns:app='http://example.com/app'><path>/etc/anything-goes-here</path></app:info></metadata>
  <memory unit='KiB'>524288</memory>
  <resource><partition>/machine</partition></resource>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>/var/lib/libvirt/images/vmlinuz</kernel>
    <cmdline>console=ttyS0 root=/dev/vda</cmdline>
  </os>
  ` + extraTop + `
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/var/lib/libvirt/images/vm.qcow2'/>
      <backingStore/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <serial type='pty'><source path='/dev/pts/3'/><target port='0'/></serial>
    <console type='pty' tty='/dev/pts/3'><source path='/dev/pts/3'/><target type='serial' port='0'/></console>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
    ` + devices + `
  </devices>
  <seclabel type='dynamic' model='dac' relabel='yes'><label>+0:+0</label><imagelabel>+0:+0</imagelabel></seclabel>
  <seclabel type='none' model='none'/>
</domain>`
}

var allowedForTest = []string{"/var/lib/libvirt/images", "/var/lib/kubelet/pods"}

var policyForTest = IncomingPolicy{AllowedPaths: allowedForTest, ConsoleDirs: []string{"/run/consoles"}, AllowedBridges: []string{"br0"}, AllowedNetworks: []string{"default"}, MaxMemoryKiB: 64 << 20, MaxVCPUs: 64}

func TestIncomingXMLAcceptsOrdinaryGuests(t *testing.T) {
	for name, x := range map[string]string{
		"plain":             guestXML("vm", "", ""),
		"kubevirt volumes":  guestXML("vm", "", `<disk type='file' device='disk'><source file='/var/lib/kubelet/pods/1234/volumes/kubernetes.io~empty-dir/disk.img'/><target dev='vdb'/></disk>`),
		"pty serial":        guestXML("vm", "", `<serial type='pty'><target port='1'/></serial>`),
		"console file":      guestXML("vm", "", `<serial type='file'><source path='/run/consoles/vm.log'/><target port='1'/></serial><console type='pty'><log file='/run/consoles/vm-console.log'/><target type='virtio'/></console>`),
		"uefi":              strings.Replace(guestXML("vm", "", ""), "</kernel>", "</kernel><loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader><nvram template='/usr/share/OVMF/OVMF_VARS_4M.fd'>/var/lib/libvirt/images/vm_VARS.fd</nvram>", 1),
		"libvirt network":   guestXML("vm", "", `<interface type='network'><source network='default'/><model type='virtio'/></interface>`),
		"raw disk":          guestXML("vm", "", `<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='/var/lib/libvirt/images/d.img'/><target dev='vdb'/></disk>`),
		"stated chain":      guestXML("vm", "", `<disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='/var/lib/libvirt/images/top.qcow2'/><backingStore type='file'><format type='qcow2'/><source file='/var/lib/libvirt/images/base.qcow2'/><backingStore/></backingStore><target dev='vdb'/></disk>`),
		"vnc on loopback":   guestXML("vm", "", `<graphics type='vnc' port='-1' autoport='yes' listen='127.0.0.1'><listen type='address' address='127.0.0.1'/></graphics><video><model type='virtio'/></video>`),
		"no audio":          guestXML("vm", "", `<audio id='1' type='none'/><input type='tablet' bus='usb'/><memballoon model='virtio'/>`),
		"empty cdrom":       guestXML("vm", "", `<disk type='file' device='cdrom'><target dev='sda' bus='sata'/></disk>`),
		"bridge nic":        guestXML("vm", "", `<interface type='bridge'><source bridge='br0'/><model type='virtio'/></interface>`),
		"no emulator given": strings.Replace(guestXML("vm", "", ""), "<emulator>/usr/bin/qemu-system-x86_64</emulator>", "", 1),
	} {
		if err := CheckIncomingXML(x, "vm", policyForTest); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
}

func TestIncomingXMLRefusesHostileGuests(t *testing.T) {
	cases := []struct {
		name, xml, domain, says string
	}{
		{"another domain's name", guestXML("other", "", ""), "vm", "<name>"},
		{"qemu commandline", guestXML("vm", `<qemu:commandline><qemu:arg value='-chardev'/></qemu:commandline>`, ""), "vm", "qemu:commandline"},
		{"qemu override", guestXML("vm", `<qemu:override><qemu:device alias='x'/></qemu:override>`, ""), "vm", "qemu:override"},
		{"hostdev", guestXML("vm", "", `<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0' bus='1' slot='0' function='0'/></source></hostdev>`), "vm", "<hostdev>"},
		{"hostdev nic", guestXML("vm", "", `<interface type='hostdev'><source><address type='pci' domain='0' bus='2' slot='0' function='0'/></source></interface>`), "vm", "hostdev"},
		{"disk on /etc/shadow", guestXML("vm", "", `<disk type='file' device='disk'><source file='/etc/shadow'/><target dev='vdb'/></disk>`), "vm", "/etc/shadow"},
		{"disk escaping by ..", guestXML("vm", "", `<disk type='file' device='disk'><source file='/var/lib/libvirt/images/../../../../etc/shadow'/><target dev='vdb'/></disk>`), "vm", "not a clean path"},
		{"host block device", guestXML("vm", "", `<disk type='block' device='disk'><source dev='/dev/sda'/><target dev='vdb'/></disk>`), "vm", "/dev/sda"},
		{"relative disk", guestXML("vm", "", `<disk type='file' device='disk'><source file='etc/shadow'/><target dev='vdb'/></disk>`), "vm", "not an absolute path"},
		{"backing store", guestXML("vm", "", `<disk type='file' device='disk'><source file='/var/lib/libvirt/images/top.qcow2'/><backingStore type='file'><format type='raw'/><source file='/root/secret.img'/></backingStore><target dev='vdb'/></disk>`), "vm", "/root/secret.img"},
		{"pool volume", guestXML("vm", "", `<disk type='volume' device='disk'><source pool='default' volume='x'/><target dev='vdb'/></disk>`), "vm", "storage pool"},
		{"host directory share", guestXML("vm", "", `<filesystem type='mount'><source dir='/'/><target dir='root'/></filesystem>`), "vm", "<filesystem>"},
		{"virtiofsd binary", guestXML("vm", "", `<filesystem type='mount'><driver type='virtiofs'/><binary path='/tmp/evil'/><source dir='/var/lib/libvirt/images/share'/><target dir='share'/></filesystem>`), "vm", "<binary"},
		{"serial to a host file", guestXML("vm", "", `<serial type='file'><source path='/etc/cron.d/x'/><target port='1'/></serial>`), "vm", "<serial>"},
		{"console to a host tty", guestXML("vm", "", `<console type='dev'><source path='/dev/tty1'/><target type='virtio'/></console>`), "vm", "<console>"},
		{"channel socket", guestXML("vm", "", `<channel type='unix'><source mode='bind' path='/run/libvirt/libvirt-sock'/><target type='virtio' name='x'/></channel>`), "vm", "<channel>"},
		{"chardev log", guestXML("vm", "", `<serial type='pty'><log file='/etc/passwd' append='on'/><target port='1'/></serial>`), "vm", "<log file>"},
		{"chardev log on another guest's image", guestXML("vm", "", `<serial type='pty'><log file='/var/lib/libvirt/images/other.qcow2'/><target port='1'/></serial>`), "vm", "<log file>"},
		{"file serial on another guest's image", guestXML("vm", "", `<serial type='file'><source path='/var/lib/libvirt/images/other.qcow2'/><target port='1'/></serial>`), "vm", "<serial> <source path> (file) \"/var/lib/libvirt/images/other.qcow2\": not under an allowed path (/run/consoles)"},
		{"file channel", guestXML("vm", "", `<channel type='file'><source path='/var/lib/libvirt/images/other.qcow2'/><target type='virtio' name='x'/></channel>`), "vm", "<channel> <source path> (file)"},
		{"writable loader on the firmware every guest boots", strings.Replace(guestXML("vm", "", ""), "</kernel>", "</kernel><loader readonly='no' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>", 1), "vm", "<os><loader readonly='no'> \"/usr/share/OVMF/OVMF_CODE_4M.fd\": not under an allowed path"},
		{"loader writable by default", strings.Replace(guestXML("vm", "", ""), "</kernel>", "</kernel><loader type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>", 1), "vm", "<loader readonly='no'>"},
		{"nvram template from another guest", strings.Replace(guestXML("vm", "", ""), "</kernel>", "</kernel><nvram template='/var/lib/libvirt/images/other_VARS.fd'>/var/lib/libvirt/images/vm_VARS.fd</nvram>", 1), "vm", "<os><nvram template>"},
		{"rng by a relative name", strings.Replace(guestXML("vm", "", ""), "/dev/urandom", "hwrng", 1), "vm", "<rng>"},
		{"kernel", strings.Replace(guestXML("vm", "", ""), "/var/lib/libvirt/images/vmlinuz", "/boot/vmlinuz", 1), "vm", "<os><kernel>"},
		{"initrd", strings.Replace(guestXML("vm", "", ""), "</kernel>", "</kernel><initrd>/boot/initrd.img</initrd>", 1), "vm", "<os><initrd>"},
		{"loader", strings.Replace(guestXML("vm", "", ""), "</kernel>", "</kernel><loader readonly='yes' type='pflash'>/usr/share/evil.fd</loader>", 1), "vm", "<os><loader>"},
		{"nvram", strings.Replace(guestXML("vm", "", ""), "</kernel>", "</kernel><nvram>/etc/nvram.fd</nvram>", 1), "vm", "<os><nvram>"},
		{"emulator", strings.Replace(guestXML("vm", "", ""), "/usr/bin/qemu-system-x86_64", "/bin/sh", 1), "vm", "<emulator>"},
		{"nic script", guestXML("vm", "", `<interface type='ethernet'><script path='/tmp/x.sh'/></interface>`), "vm", "<script"},
		{"static label", strings.Replace(guestXML("vm", "", ""), "<seclabel type='none' model='none'/>", "<seclabel type='static' model='selinux' relabel='yes'><label>system_u:system_r:unconfined_t:s0</label></seclabel>", 1), "vm", "<seclabel"},
		{"unconfined", strings.Replace(guestXML("vm", "", ""), "<seclabel type='none' model='none'/>", "<seclabel type='none'/>", 1), "vm", "<seclabel"},
		{"rng from a host file", strings.Replace(guestXML("vm", "", ""), "/dev/urandom", "/dev/sda", 1), "vm", "<rng>"},
		{"graphics socket", guestXML("vm", "", `<graphics type='vnc'><listen type='socket' socket='/etc/vnc.sock'/></graphics>`), "vm", "/etc/vnc.sock"},
		{"display socket on another guest's disk", guestXML("vm", "", `<graphics type='vnc' socket='/var/lib/libvirt/images/other.qcow2'><listen type='socket' socket='/var/lib/libvirt/images/other.qcow2'/></graphics>`), "vm", "a display's socket is libvirt's to place"},
		{"display socket by its listen", guestXML("vm", "", `<graphics type='spice'><listen type='socket' socket='/var/lib/libvirt/images/other.qcow2'/></graphics>`), "vm", "a display's socket is libvirt's to place"},
		{"audio file", guestXML("vm", "", `<audio id='1' type='file' path='/etc/x.wav'/>`), "vm", "<audio type='file'>"},
		{"relative kernel first of two", strings.Replace(guestXML("vm", "", ""), "<kernel>", "<kernel>boot/vmlinuz</kernel><kernel>", 1), "vm", "relative path"},
		{"fw_cfg file", guestXML("vm", `<sysinfo type='fwcfg'><entry name='opt/x' file='etc/shadow'/></sysinfo>`, ""), "vm", "<sysinfo>"},
		{"disk secret", guestXML("vm", "", `<disk type='network' device='disk'><source protocol='rbd' name='pool/img'><host name='10.0.0.5'/><auth username='admin'><secret type='ceph' usage='x'/></auth></source><target dev='vdc'/></disk>`), "vm", "<disk type='network'>"},
		{"disk encryption", guestXML("vm", "", `<disk type='file' device='disk'><source file='/var/lib/libvirt/images/e.qcow2'><encryption format='luks'><secret type='passphrase' uuid='0a81f5b2-8403-7b23-c8d6-21ccc2f80d6f'/></encryption></source><target dev='vdb'/></disk>`), "vm", "<encryption>"},
		{"any filesystem", guestXML("vm", "", `<filesystem type='mount'><source dir='/var/lib/libvirt/images/share'/><target dir='share'/></filesystem>`), "vm", "<filesystem>"},
		{"direct nic", guestXML("vm", "", `<interface type='direct'><source dev='eth0' mode='bridge'/></interface>`), "vm", "type='direct'"},
		{"ethernet nic", guestXML("vm", "", `<interface type='ethernet'><target dev='tap0'/></interface>`), "vm", "type='ethernet'"},
		{"vhost-user nic", guestXML("vm", "", `<interface type='vhostuser'><source type='unix' path='/var/lib/libvirt/images/vu.sock' mode='client'/></interface>`), "vm", "vhost"},
		{"vhost-user disk", guestXML("vm", "", `<disk type='vhostuser' device='disk'><source type='unix' path='/var/lib/libvirt/images/vu.sock'/><target dev='vdb'/></disk>`), "vm", "vhost"},
		{"tcp serial", guestXML("vm", "", `<serial type='tcp'><source mode='connect' host='10.0.0.1' service='23'/><target port='1'/></serial>`), "vm", "<serial type='tcp'>"},
		{"udp channel", guestXML("vm", "", `<channel type='udp'><source mode='bind' host='0.0.0.0' service='1'/><target type='virtio' name='x'/></channel>`), "vm", "<channel type='udp'>"},
		{"unix channel under a prefix", guestXML("vm", "", `<channel type='unix'><source mode='bind' path='/var/lib/libvirt/images/ga.sock'/><target type='virtio' name='org.qemu.guest_agent.0'/></channel>`), "vm", "<channel type='unix'>"},
		{"pipe parallel", guestXML("vm", "", `<parallel type='pipe'><source path='/var/lib/libvirt/images/p'/><target port='0'/></parallel>`), "vm", "<parallel type='pipe'>"},
		{"smartcard", guestXML("vm", "", `<smartcard mode='passthrough' type='tcp'><source mode='connect' host='10.0.0.1' service='2001'/></smartcard>`), "vm", "<smartcard type='tcp'>"},
		{"redirdev", guestXML("vm", "", `<redirdev bus='usb' type='tcp'><source mode='connect' host='10.0.0.1' service='4000'/></redirdev>`), "vm", "<redirdev type='tcp'>"},
		{"vcpusched", guestXML("vm", `<cputune><vcpusched vcpus='0' scheduler='fifo' priority='1'/></cputune>`, ""), "vm", "<vcpusched>"},
		{"iothreadsched", guestXML("vm", `<cputune><iothreadsched iothreads='1' scheduler='fifo' priority='1'/></cputune>`, ""), "vm", "<iothreadsched>"},
		{"emulatorsched", guestXML("vm", `<cputune><emulatorsched scheduler='fifo' priority='1'/></cputune>`, ""), "vm", "<emulatorsched>"},
		{"locked memory", guestXML("vm", `<memoryBacking><locked/></memoryBacking>`, ""), "vm", "<locked/>"},
		{"NUMA cells past the node", guestXML("vm", `<cpu><numa><cell id='0' cpus='0' memory='40' unit='TiB'/></numa></cpu>`, ""), "vm", "NUMA cells"},
		{"huge pages", guestXML("vm", `<memoryBacking><hugepages><page size='1' unit='G'/></hugepages></memoryBacking>`, ""), "vm", "<hugepages>"},
		{"cache allocation", guestXML("vm", `<cputune><cachetune vcpus='0'><cache id='0' level='3' type='both' size='3' unit='MiB'/></cachetune></cputune>`, ""), "vm", "<cachetune>"},
		{"memory bandwidth", guestXML("vm", `<cputune><memorytune vcpus='0'><node id='0' bandwidth='60'/></memorytune></cputune>`, ""), "vm", "<memorytune>"},
		{"vcpu pins", guestXML("vm", `<cputune><vcpupin vcpu='0' cpuset='1'/></cputune>`, ""), "vm", "<vcpupin>"},
		{"vcpu cpuset", strings.Replace(guestXML("vm", "", ""), "<memory unit=", "<vcpu placement='static' cpuset='1-3'>2</vcpu><memory unit=", 1), "vm", "<vcpu cpuset='1-3'>"},
		{"numatune", guestXML("vm", `<numatune><memory mode='strict' nodeset='1'/></numatune>`, ""), "vm", "<numatune>"},
		{"emulator pins", guestXML("vm", `<cputune><emulatorpin cpuset='1'/></cputune>`, ""), "vm", "<emulatorpin>"},
		{"watchdog dump", guestXML("vm", "", `<watchdog model='i6300esb' action='dump'/>`), "vm", "<watchdog action='dump'>"},
		{"core dump on crash", strings.Replace(guestXML("vm", "", ""), "<memory unit=", "<on_crash>coredump-destroy</on_crash><memory unit=", 1), "vm", "<on_crash>coredump-destroy"},
		{"baselabel", strings.Replace(guestXML("vm", "", ""), "<seclabel type='none' model='none'/>", "<seclabel type='dynamic' model='selinux'><baselabel>system_u:system_r:unconfined_t:s0</baselabel></seclabel>", 1), "vm", "<baselabel>"},
		{"device seclabel", guestXML("vm", "", `<disk type='file' device='disk'><source file='/var/lib/libvirt/images/d.img'><seclabel model='dac' relabel='no'/></source><target dev='vdb'/></disk>`), "vm", "<seclabel>"},
		{"tpm", guestXML("vm", "", `<tpm model='tpm-tis'><backend type='passthrough'><device path='/dev/tpm0'/></backend></tpm>`), "vm", "<tpm>"},
		{"shmem", guestXML("vm", "", `<shmem name='x'><model type='ivshmem-plain'/><size unit='M'>4</size></shmem>`), "vm", "<shmem>"},
		{"evdev input", guestXML("vm", "", `<input type='evdev'><source dev='/dev/input/event1'/></input>`), "vm", "evdev"},
		{"passthrough input", guestXML("vm", "", `<input type='passthrough' bus='virtio'><source evdev='/dev/input/event1'/></input>`), "vm", "passthrough"},
		{"nbd relative socket", guestXML("vm", "", `<disk type='network' device='disk'><source protocol='nbd' name='x'><host transport='unix' socket='run/x.sock'/></source><target dev='vdb'/></disk>`), "vm", "<disk type='network'>"},
		{"not XML", "<domain><name>vm</name", "vm", "does not parse"},
		// The allowlist: what a hostile peer tried and a denylist let through.
		{"udp nic", guestXML("vm", "", `<interface type='udp'><source address='127.0.0.1' port='2379'><local address='127.0.0.1' port='11111'/></source></interface>`), "vm", "<interface type='udp'>"},
		{"client nic", guestXML("vm", "", `<interface type='client'><source address='127.0.0.1' port='2379'/></interface>`), "vm", "<interface type='client'>"},
		{"server nic", guestXML("vm", "", `<interface type='server'><source address='0.0.0.0' port='5558'/></interface>`), "vm", "<interface type='server'>"},
		{"mcast nic", guestXML("vm", "", `<interface type='mcast'><source address='230.0.0.1' port='5558'/></interface>`), "vm", "<interface type='mcast'>"},
		{"user networking", guestXML("vm", "", `<interface type='user'><backend type='passt'/><portForward proto='tcp'><range start='22'/></portForward></interface>`), "vm", "<interface type='user'>"},
		{"another bridge", guestXML("vm", "", `<interface type='bridge'><source bridge='br-storage'/></interface>`), "vm", "br-storage"},
		{"ovs port", guestXML("vm", "", `<interface type='bridge'><source bridge='br0'/><virtualport type='openvswitch'><parameters interfaceid='09b11c53-8b5c-4eeb-8f00-d84eaa0aaa4f'/></virtualport></interface>`), "vm", "<virtualport>"},
		{"egd rng", strings.Replace(guestXML("vm", "", ""), "<backend model='random'>/dev/urandom</backend>", "<backend model='egd' type='tcp'><source mode='connect' host='127.0.0.1' service='2379'/></backend>", 1), "vm", "<rng><backend model='egd'>"},
		{"nbd to loopback", guestXML("vm", "", `<disk type='network' device='disk'><source protocol='nbd' name='x'><host name='127.0.0.1' port='10809'/></source><target dev='vdb'/></disk>`), "vm", "<disk type='network'>"},
		{"iscsi", guestXML("vm", "", `<disk type='network' device='disk'><source protocol='iscsi' name='iqn.2013-07.com.example:iscsi-nopool/1'><host name='10.0.0.9' port='3260'/><initiator><iqn name='iqn.2013-07.com.example:client'/></initiator></source><target dev='sdb'/></disk>`), "vm", "<disk type='network'>"},
		{"http disk", guestXML("vm", "", `<disk type='network' device='cdrom'><source protocol='http' name='/latest/meta-data'><host name='169.254.169.254' port='80'/></source><target dev='sdc'/></disk>`), "vm", "<disk type='network'>"},
		{"host smbios", strings.Replace(guestXML("vm", "", ""), "</os>", "<smbios mode='host'/></os>", 1), "vm", "<smbios mode='host'>"},
		{"smartcard from host", guestXML("vm", "", `<smartcard mode='host'/>`), "vm", "<devices><smartcard>"},
		{"vnc everywhere", guestXML("vm", "", `<graphics type='vnc' port='-1' autoport='yes' listen='0.0.0.0'/>`), "vm", "<graphics listen='0.0.0.0'>"},
		{"vnc listen element", guestXML("vm", "", `<graphics type='vnc' port='-1'><listen type='address' address='10.0.0.1'/></graphics>`), "vm", "<graphics><listen address='10.0.0.1'>"},
		{"alsa", guestXML("vm", "", `<audio id='1' type='alsa'><input dev='hw:0'/><output dev='hw:0'/></audio>`), "vm", "<audio type='alsa'>"},
		{"vsock", guestXML("vm", "", `<vsock model='virtio'><cid auto='yes'/></vsock>`), "vm", "<devices><vsock>"},
		{"qcow2 with no chain", strings.Replace(guestXML("vm", "", ""), "<backingStore/>", "", 1), "vm", "no <backingStore>"},
		{"chain with an open end", guestXML("vm", "", `<disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='/var/lib/libvirt/images/top.qcow2'/><backingStore type='file'><format type='qcow2'/><source file='/var/lib/libvirt/images/base.qcow2'/></backingStore><target dev='vdb'/></disk>`), "vm", "no <backingStore> of its own"},
		{"4 TiB", strings.Replace(guestXML("vm", "", ""), "<memory unit='KiB'>524288</memory>", "<memory unit='TiB'>4</memory>", 1), "vm", "<memory unit='TiB'>4</memory>"},
		{"network backing store", guestXML("vm", "", `<disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='/var/lib/libvirt/images/top.qcow2'/><backingStore type='network'><format type='raw'/><source protocol='http' name='/latest/meta-data'><host name='169.254.169.254'/></source><backingStore/></backingStore><target dev='vdb'/></disk>`), "vm", "<backingStore type='network'>"},
		{"network nvram", strings.Replace(guestXML("vm", "", ""), "</kernel>", "</kernel><nvram type='network'><source protocol='iscsi' name='iqn.x/1'><host name='10.0.0.9'/></source></nvram>", 1), "vm", "<nvram type='network'>"},
		{"network data store", guestXML("vm", "", `<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='/var/lib/libvirt/images/d.img'><dataStore type='network'><format type='raw'/><source protocol='nbd' name='x'><host name='127.0.0.1'/></source></dataStore></source><target dev='vdb'/></disk>`), "vm", "<dataStore type='network'>"},
		{"mirror", guestXML("vm", "", `<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='/var/lib/libvirt/images/d.img'/><mirror type='file' file='/var/lib/libvirt/images/m.img' format='raw' job='copy'/><target dev='vdb'/></disk>`), "vm", "<mirror>"},
		{"another network", guestXML("vm", "", `<interface type='network'><source network='sriov-pool'/></interface>`), "vm", "sriov-pool"},
		{"a port group", guestXML("vm", "", `<interface type='network'><source network='default' portgroup='admin'/></interface>`), "vm", "portgroup"},
		{"4096 vCPUs", strings.Replace(guestXML("vm", "", ""), "<memory unit='KiB'>524288</memory>", "<memory unit='KiB'>524288</memory><vcpu>4096</vcpu>", 1), "vm", "<vcpu>4096</vcpu>"},
	}
	for _, c := range cases {
		err := CheckIncomingXML(c.xml, c.domain, policyForTest)
		var r *XMLRefusal
		if !errors.As(err, &r) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want a refusal naming %q", c.name, err, c.says)
		}
	}
}

// TestCanonicalXMLHoldsOnlyWhatWasChecked: of a repeated element libvirt
// reads the first and Go the last; libvirt gets Go's reading, marshalled
// again, so a first copy the checks never saw does not reach it.
func TestCanonicalXMLHoldsOnlyWhatWasChecked(t *testing.T) {
	for name, c := range map[string]struct{ xml, gone string }{
		"name twice":     {strings.Replace(guestXML("vm", "", ""), "<name>vm</name>", "<name>other</name><name>vm</name>", 1), "other"},
		"emulator twice": {strings.Replace(guestXML("vm", "", ""), "<emulator>", "<emulator>/bin/sh</emulator><emulator>", 1), "/bin/sh"},
	} {
		canon, err := CanonicalIncomingXML(c.xml, "vm", policyForTest)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if strings.Contains(canon, c.gone) || strings.Count(canon, "<name>") != 1 || strings.Count(canon, "<emulator>") != 1 {
			t.Errorf("%s: the canonical XML still holds %q or a repeated element:\n%s", name, c.gone, canon)
		}
	}
}

func TestAllowedPathIsWholeComponents(t *testing.T) {
	for path, ok := range map[string]bool{
		"/var/lib/libvirt/images":          true,
		"/var/lib/libvirt/images/a/b.img":  true,
		"/var/lib/libvirt/images-evil/x":   false,
		"/var/lib/libvirt/images/../qemu/": false,
		"/var/lib/libvirt/imagesx":         false,
	} {
		if err := allowedPath(path, allowedForTest); (err == nil) != ok {
			t.Errorf("%s: %v, want allowed=%v", path, err, ok)
		}
	}
}

// A path is resolved beneath its allowed directory, not compared as text:
// a link there to /etc/shadow would be opened by libvirt as root.
func TestIncomingPathsAreResolvedWithoutLinks(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "disk.img"), nil, 0o600)
	os.Symlink("/etc/shadow", filepath.Join(dir, "shadow.img"))
	os.Mkdir(filepath.Join(dir, "real"), 0o755)
	os.Symlink("/etc", filepath.Join(dir, "etc"))
	os.WriteFile(filepath.Join(dir, "twice.img"), nil, 0o600)
	os.Link(filepath.Join(dir, "twice.img"), filepath.Join(t.TempDir(), "second-name"))
	unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600)
	pol := IncomingPolicy{AllowedPaths: []string{dir}}
	disk := func(path string) string {
		return strings.Replace(guestXML("vm", "", `<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='`+path+`'/><target dev='vdb'/></disk>`),
			"/var/lib/libvirt/images/", dir+"/", -1)
	}
	for path, ok := range map[string]bool{
		dir + "/disk.img":     true,
		dir + "/real/new.img": true, // not there yet: libvirt creates or fails
		dir + "/shadow.img":   false,
		dir + "/etc/shadow":   false,
		dir + "/etc/new.img":  false,
		// Checked as written: libvirt goes through the link, then up.
		dir + "/etc/../disk.img": false,
		dir + "/twice.img":       false,
		dir + "/fifo":            false,
	} {
		err := CheckIncomingXML(disk(path), "vm", pol)
		if (err == nil) != ok {
			t.Errorf("%s: %v, want accepted=%v", path, err, ok)
		}
		if !ok && err != nil && !strings.Contains(err.Error(), "symbolic link") && !strings.Contains(err.Error(), "hard links") &&
			!strings.Contains(err.Error(), "not a clean path") && !strings.Contains(err.Error(), "neither a file") {
			t.Errorf("%s: refusal %q does not say what is in the way", path, err)
		}
	}
}

// 2 MiB of <rng/> cost 1.5 s of CPU per check: a domain with more tags
// than any real one is refused before it is parsed.
func TestIncomingXMLWithTooManyTagsIsRefusedCheaply(t *testing.T) {
	x := guestXML("vm", "", strings.Repeat("<rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>", 30000))
	start := time.Now()
	err := CheckIncomingXML(x, "vm", policyForTest)
	if err == nil || !strings.Contains(err.Error(), "tags, more than any domain's") {
		t.Fatalf("%d bytes of RNGs: %v", len(x), err)
	}
	t.Logf("refused %d bytes in %v", len(x), time.Since(start))
}

// A guest as virt-manager makes it, with SPICE and a guest agent, and an
// LVM volume by its udev link: nothing in it reaches the host.
func TestIncomingXMLAcceptsASpiceGuestOnLVM(t *testing.T) {
	devs := `<channel type='unix'><source mode='bind'/><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
    <channel type='spicevmc'><target type='virtio' name='com.redhat.spice.0'/></channel>
    <graphics type='spice' autoport='yes'><listen type='address'/><image compression='off'/></graphics>
    <sound model='ich9'/><audio id='1' type='spice'/>
    <video><model type='qxl' ram='65536' vram='65536' vgamem='16384' heads='1' primary='yes'/></video>
    <redirdev bus='usb' type='spicevmc'/><redirdev bus='usb' type='spicevmc'/><hub type='usb'/>`
	if err := CheckIncomingXML(guestXML("vm", "", devs), "vm", policyForTest); err != nil {
		t.Errorf("a SPICE guest: %v", err)
	}
	// A block device node stands for a logical volume; its link is what
	// LVM makes. Made under /dev, where only root writes.
	testenv.Root(t, "make a block device node under /dev")
	vg, err := os.MkdirTemp("/dev", "ferry-vg-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(vg)
	dev := filepath.Join(vg, "dm-0")
	if err := unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
		t.Fatal(err)
	}
	os.Symlink(dev, filepath.Join(vg, "lv"))
	os.Symlink("/etc/passwd", filepath.Join(vg, "notblock"))
	pol := IncomingPolicy{AllowedPaths: []string{vg}}
	for path, ok := range map[string]bool{vg + "/lv": true, vg + "/notblock": false} {
		x := strings.Replace(guestXML("vm", "", `<disk type='block' device='disk'><driver name='qemu' type='raw'/><source dev='`+path+`'/><target dev='vdb'/></disk>`),
			"/var/lib/libvirt/images/vmlinuz", vg+"/lv", 1)
		x = strings.Replace(x, `<disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/var/lib/libvirt/images/vm.qcow2'/>`, `<disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>`, 1)
		if err := CheckIncomingXML(x, "vm", pol); (err == nil) != ok {
			t.Errorf("%s: %v, want accepted=%v", path, err, ok)
		}
	}
}

// What libvirtxml does not model would be dropped without a word when the
// checked domain is marshalled again for libvirt: it is refused, named.
func TestIncomingXMLThatWouldLoseSomethingIsRefused(t *testing.T) {
	for _, c := range []struct{ name, extraTop, devices, says string }{
		{"an element", `<features><acpi/><ferry-future-feature state='on'/></features>`, "", "<domain/features/ferry-future-feature>"},
		{"an attribute", `<features><acpi ferry-future='yes'/></features>`, "", "<domain/features/acpi @ferry-future>"},
	} {
		_, err := CanonicalIncomingXML(guestXML("vm", c.extraTop, c.devices), "vm", policyForTest)
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "would be lost") {
			t.Errorf("%s: %v, want a refusal naming %s as lost", c.name, err, c.says)
		}
	}
	if _, err := CanonicalIncomingXML(guestXML("vm", "<features><acpi/></features>", ""), "vm", policyForTest); err != nil {
		t.Errorf("a domain libvirtxml carries whole was refused: %v", err)
	}
}
