package preflight

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/api"
)

// found is what a test expects of a Blocker; its severity is the code's
// and its message is checked to name the device.
type found struct{ code, device, path string }

type reasonCase struct {
	name  string
	xml   string
	wants []found
}

var reasonCases = []reasonCase{
	{name: "plain guest", xml: guest{}.xml()},
	{name: "kubevirt guest", xml: kubevirtDomain, wants: []found{
		{CodeLocalDisk, "vda", "/var/run/kubevirt-private/vmi-disks/rootdisk/disk.img"},
		{CodeLocalDisk, "vdb", "/var/run/kubevirt-ephemeral-disks/cloud-init-data/default/vmi-fedora/noCloud.iso"},
	}},

	// Host devices.
	{name: "pci hostdev", xml: guest{devices: `
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <driver name='vfio'/>
      <source>
        <address domain='0x0000' bus='0x03' slot='0x00' function='0x0'/>
      </source>
      <alias name='hostdev0'/>
      <address type='pci' domain='0x0000' bus='0x06' slot='0x00' function='0x0'/>
    </hostdev>`}.xml(), wants: []found{{CodePCIPassthrough, "0000:03:00.0", ""}}},
	{name: "sr-iov interface", xml: guest{devices: `
    <interface type='hostdev' managed='yes'>
      <mac address='52:54:00:6d:90:02'/>
      <driver name='vfio'/>
      <source>
        <address type='pci' domain='0x0000' bus='0x3b' slot='0x02' function='0x1'/>
      </source>
      <alias name='hostdev1'/>
      <address type='pci' domain='0x0000' bus='0x07' slot='0x00' function='0x0'/>
    </interface>`}.xml(), wants: []found{{CodePCIPassthrough, "0000:3b:02.1", ""}}},
	{name: "failover pair", xml: guest{devices: `
    <interface type='bridge'>
      <mac address='52:54:00:aa:bb:01'/>
      <source bridge='br0'/>
      <target dev='vnet3'/>
      <model type='virtio'/>
      <teaming type='persistent'/>
      <alias name='ua-backup0'/>
      <address type='pci' domain='0x0000' bus='0x03' slot='0x00' function='0x0'/>
    </interface>
    <interface type='hostdev' managed='yes'>
      <mac address='52:54:00:aa:bb:01'/>
      <driver name='vfio'/>
      <source>
        <address type='pci' domain='0x0000' bus='0x3b' slot='0x02' function='0x2'/>
      </source>
      <teaming type='transient' persistent='ua-backup0'/>
      <alias name='ua-failover0'/>
      <address type='pci' domain='0x0000' bus='0x04' slot='0x00' function='0x0'/>
    </interface>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source>
        <address domain='0x0000' bus='0x3b' slot='0x02' function='0x3'/>
      </source>
      <teaming type='transient' persistent='ua-backup1'/>
      <alias name='ua-failover1'/>
      <address type='pci' domain='0x0000' bus='0x05' slot='0x00' function='0x0'/>
    </hostdev>`}.xml(), wants: []found{
		{CodePCIFailover, "0000:3b:02.2", ""},
		{CodePCIFailover, "0000:3b:02.3", ""},
	}},
	{name: "mdev", xml: guest{devices: `
    <hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci' display='off'>
      <source>
        <address uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/>
      </source>
      <alias name='hostdev0'/>
      <address type='pci' domain='0x0000' bus='0x06' slot='0x00' function='0x0'/>
    </hostdev>`}.xml(), wants: []found{{CodeMdev, "c2177883-f1bb-47f0-914d-32a22e3a8804", ""}}},
	{name: "usb hostdev", xml: guest{devices: `
    <hostdev mode='subsystem' type='usb' managed='no'>
      <source>
        <vendor id='0x0529'/>
        <product id='0x0001'/>
        <address bus='1' device='4'/>
      </source>
      <alias name='hostdev0'/>
      <address type='usb' bus='0' port='1'/>
    </hostdev>
    <hostdev mode='subsystem' type='usb' managed='no'>
      <source>
        <address bus='2' device='3'/>
      </source>
      <alias name='hostdev1'/>
      <address type='usb' bus='0' port='2'/>
    </hostdev>`}.xml(), wants: []found{
		{CodeHostDevice, "0529:0001", ""},
		{CodeHostDevice, "bus 002 device 003", ""},
	}},
	{name: "scsi hostdevs", xml: guest{devices: `
    <hostdev mode='subsystem' type='scsi' managed='no' sgio='filtered' rawio='yes'>
      <source>
        <adapter name='scsi_host0'/>
        <address bus='0' target='0' unit='0'/>
      </source>
      <readonly/>
      <alias name='hostdev0'/>
      <address type='drive' controller='0' bus='0' target='0' unit='0'/>
    </hostdev>
    <hostdev mode='subsystem' type='scsi_host' managed='no'>
      <source protocol='vhost' wwpn='naa.5123456789abcde0'/>
      <alias name='hostdev1'/>
      <address type='pci' domain='0x0000' bus='0x08' slot='0x00' function='0x0'/>
    </hostdev>`}.xml(), wants: []found{
		{CodeHostDevice, "scsi_host0:0:0:0", ""},
		{CodeHostDevice, "naa.5123456789abcde0", ""},
	}},

	// Confidential guests.
	{name: "sev", xml: guest{tail: `
  <launchSecurity type='sev' kernelHashes='yes'>
    <cbitpos>47</cbitpos>
    <reducedPhysBits>1</reducedPhysBits>
    <policy>0x0033</policy>
  </launchSecurity>`}.xml(), wants: []found{{CodeLaunchSecurity, "sev", ""}}},
	{name: "sev-snp", xml: guest{tail: `
  <launchSecurity type='sev-snp' authorKey='no' vcek='yes'>
    <cbitpos>51</cbitpos>
    <reducedPhysBits>1</reducedPhysBits>
    <policy>0x00030000</policy>
  </launchSecurity>`}.xml(), wants: []found{{CodeLaunchSecurity, "sev-snp", ""}}},
	{name: "tdx", xml: guest{tail: `
  <launchSecurity type='tdx'>
    <policy>0x10000000</policy>
    <quoteGenerationService path='/var/run/tdx-qgs/qgs.socket'/>
  </launchSecurity>`}.xml(), wants: []found{{CodeLaunchSecurity, "tdx", ""}}},
	{name: "s390 protected virtualization", xml: guest{tail: `
  <launchSecurity type='s390-pv'/>`}.xml(), wants: []found{{CodeLaunchSecurity, "s390-pv", ""}}},

	// Host filesystems and memory.
	{name: "virtiofs", xml: guest{memoryBacking: `
  <memoryBacking>
    <source type='memfd'/>
    <access mode='shared'/>
  </memoryBacking>`, devices: `
    <filesystem type='mount' accessmode='passthrough'>
      <driver type='virtiofs' queue='1024'/>
      <binary path='/usr/libexec/virtiofsd' xattr='on'>
        <cache mode='always'/>
      </binary>
      <source dir='/srv/shared'/>
      <target dir='shared'/>
      <alias name='fs0'/>
      <address type='pci' domain='0x0000' bus='0x05' slot='0x00' function='0x0'/>
    </filesystem>`}.xml(), wants: []found{{CodeVirtiofs, "shared", "/srv/shared"}}},
	{name: "virtiofs started outside libvirt", xml: guest{devices: `
    <filesystem type='mount'>
      <driver type='virtiofs' queue='1024'/>
      <source socket='/run/virtiofsd/shared.sock'/>
      <target dir='shared'/>
    </filesystem>`}.xml(), wants: []found{{CodeVirtiofs, "shared", "/run/virtiofsd/shared.sock"}}},
	{name: "9p export", xml: guest{devices: `
    <filesystem type='mount' accessmode='mapped'>
      <driver type='path' wrpolicy='immediate'/>
      <source dir='/srv/export'/>
      <target dir='export'/>
      <alias name='fs0'/>
      <address type='pci' domain='0x0000' bus='0x05' slot='0x00' function='0x0'/>
    </filesystem>`}.xml(), wants: []found{{CodeHostFilesystem, "export", "/srv/export"}}},
	{name: "shared memory backing alone", xml: guest{memoryBacking: `
  <memoryBacking>
    <hugepages/>
    <access mode='shared'/>
  </memoryBacking>`}.xml()},
	{name: "ivshmem", xml: guest{devices: `
    <shmem name='ivshmem0'>
      <model type='ivshmem-plain'/>
      <size unit='M'>4</size>
      <alias name='shmem0'/>
      <address type='pci' domain='0x0000' bus='0x0a' slot='0x00' function='0x0'/>
    </shmem>
    <shmem name='shmem_server' role='peer'>
      <model type='ivshmem-doorbell'/>
      <server path='/tmp/socket-shmem'/>
      <msi vectors='32' ioeventfd='on'/>
      <alias name='shmem1'/>
      <address type='pci' domain='0x0000' bus='0x0b' slot='0x00' function='0x0'/>
    </shmem>
    <shmem name='owned' role='master'>
      <model type='ivshmem-plain'/>
      <size unit='M'>8</size>
      <alias name='shmem2'/>
      <address type='pci' domain='0x0000' bus='0x0c' slot='0x00' function='0x0'/>
    </shmem>`}.xml(), wants: []found{
		{CodeSharedMemory, "ivshmem0", ""},
		{CodeSharedMemory, "shmem_server", "/tmp/socket-shmem"},
		{CodeSharedMemoryMaster, "owned", ""},
	}},

	// Disks.
	{name: "persistent reservations", xml: guest{devices: `
    <disk type='block' device='lun'>
      <driver name='qemu' type='raw' cache='none' io='native'/>
      <source dev='/dev/mapper/mpatha' index='1'>
        <reservations managed='yes'>
          <source type='unix' path='/var/lib/libvirt/qemu/domain-7-plain/pr-helper0.sock' mode='client'/>
        </reservations>
      </source>
      <backingStore/>
      <target dev='sda' bus='scsi'/>
      <alias name='scsi0-0-0-0'/>
      <address type='drive' controller='0' bus='0' target='0' unit='0'/>
    </disk>`}.xml(), wants: []found{
		{CodePersistentReservations, "sda", "/dev/mapper/mpatha"},
		{CodeLocalDisk, "sda", "/dev/mapper/mpatha"},
	}},
	{name: "persistent reservations QEMU migrates", xml: guest{devices: `
    <disk type='block' device='lun'>
      <driver name='qemu' type='raw' cache='none' io='native'/>
      <source dev='/dev/mapper/mpathb' index='1'>
        <reservations enabled='yes' managed='yes' migration='yes'/>
      </source>
      <target dev='sdb' bus='scsi'/>
    </disk>`}.xml(), wants: []found{{CodeLocalDisk, "sdb", "/dev/mapper/mpathb"}}},
	{name: "transient disk", xml: guest{devices: `
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/var/lib/libvirt/images/base.qcow2' index='1'/>
      <backingStore/>
      <target dev='vda' bus='virtio'/>
      <transient/>
      <alias name='virtio-disk0'/>
    </disk>`}.xml(), wants: []found{
		{CodeTransientDisk, "vda", "/var/lib/libvirt/images/base.qcow2"},
		{CodeLocalDisk, "vda", "/var/lib/libvirt/images/base.qcow2"},
	}},
	{name: "block copy running", xml: guest{devices: `
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/var/lib/libvirt/images/guest.qcow2' index='1'/>
      <backingStore/>
      <mirror type='file' file='/mnt/new/guest.qcow2' format='qcow2' job='copy' ready='yes'>
        <format type='qcow2'/>
        <source file='/mnt/new/guest.qcow2' index='3'/>
      </mirror>
      <target dev='vda' bus='virtio'/>
      <alias name='virtio-disk0'/>
    </disk>`}.xml(), wants: []found{
		{CodeBlockJob, "vda", "/mnt/new/guest.qcow2"},
		{CodeLocalDisk, "vda", "/var/lib/libvirt/images/guest.qcow2"},
	}},
	{name: "local and shared disks", xml: guest{devices: `
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='none'/>
      <source file='/var/lib/libvirt/images/root.qcow2' index='4'/>
      <backingStore type='file' index='5'>
        <format type='qcow2'/>
        <source file='/var/lib/libvirt/images/base.qcow2'/>
        <backingStore/>
      </backingStore>
      <target dev='vda' bus='virtio'/>
      <alias name='virtio-disk0'/>
    </disk>
    <disk type='block' device='disk'>
      <driver name='qemu' type='raw' cache='none' io='native'/>
      <source dev='/dev/vg0/data' index='3'/>
      <backingStore/>
      <target dev='vdb' bus='virtio'/>
      <alias name='virtio-disk1'/>
    </disk>
    <disk type='network' device='disk'>
      <driver name='qemu' type='raw'/>
      <source protocol='iscsi' name='iqn.2013-07.com.example:storage/1' index='2'>
        <host name='192.0.2.10' port='3260'/>
      </source>
      <target dev='vdc' bus='virtio'/>
      <alias name='virtio-disk2'/>
    </disk>
    <disk type='network' device='disk'>
      <driver name='qemu' type='raw'/>
      <source protocol='nbd' name='export0' index='1'>
        <host transport='unix' socket='/run/qsd/nbd.sock'/>
      </source>
      <target dev='vdd' bus='virtio'/>
      <alias name='virtio-disk3'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='/var/lib/libvirt/images/install.iso' index='6'/>
      <backingStore/>
      <target dev='sda' bus='sata'/>
      <readonly/>
      <alias name='sata0-0-0'/>
      <address type='drive' controller='0' bus='0' target='0' unit='0'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu'/>
      <target dev='sdb' bus='sata'/>
      <readonly/>
      <alias name='sata0-0-1'/>
      <address type='drive' controller='0' bus='0' target='0' unit='1'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='/srv/shared/seed.img' index='7'/>
      <target dev='vde' bus='virtio'/>
      <readonly/>
      <shareable/>
      <alias name='virtio-disk4'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw' cache='none'/>
      <source file='/srv/cluster/quorum.img' index='8'/>
      <target dev='vdf' bus='virtio'/>
      <shareable/>
      <alias name='virtio-disk5'/>
    </disk>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source pool='default' volume='scratch.qcow2'/>
      <target dev='vdg' bus='virtio'/>
    </disk>
    <disk type='nvme' device='disk'>
      <driver name='qemu' type='raw'/>
      <source type='pci' managed='yes' namespace='1'>
        <address domain='0x0000' bus='0x01' slot='0x00' function='0x0'/>
      </source>
      <target dev='vdh' bus='virtio'/>
    </disk>
    <disk type='file' device='floppy'>
      <driver name='qemu' type='raw'/>
      <source file='/var/lib/libvirt/images/drivers.img'/>
      <target dev='fda' bus='fdc'/>
    </disk>`}.xml(), wants: []found{
		{CodeLocalDisk, "vda", "/var/lib/libvirt/images/root.qcow2"},
		{CodeLocalDisk, "vdb", "/dev/vg0/data"},
		{CodeLocalDisk, "vdd", "/run/qsd/nbd.sock"},
		{CodeLocalDisk, "sda", "/var/lib/libvirt/images/install.iso"},
		{CodeLocalDisk, "vdf", "/srv/cluster/quorum.img"},
		{CodeLocalDisk, "vdg", ""},
		{CodeLocalDisk, "vdh", ""},
		{CodeLocalDisk, "fda", "/var/lib/libvirt/images/drivers.img"},
	}},

	// Backends on this host.
	{name: "vhost-user", xml: guest{devices: `
    <disk type='vhostuser' device='disk' snapshot='no'>
      <driver name='qemu' type='raw'/>
      <source type='unix' path='/var/run/spdk/vhost.0'>
        <reconnect enabled='yes' timeout='10'/>
      </source>
      <target dev='vdb' bus='virtio'/>
      <alias name='virtio-disk1'/>
    </disk>
    <interface type='vhostuser'>
      <mac address='52:54:00:3b:83:1a'/>
      <source type='unix' path='/var/run/openvswitch/vhu0' mode='client'/>
      <target dev='vhu0'/>
      <model type='virtio'/>
      <alias name='net0'/>
      <address type='pci' domain='0x0000' bus='0x03' slot='0x00' function='0x0'/>
    </interface>
    <interface type='vhostuser'>
      <mac address='52:54:00:3b:83:1b'/>
      <source type='unix' path='/run/libvirt/qemu/passt/7-plain-net1.socket' mode='client'/>
      <model type='virtio'/>
      <backend type='passt'/>
      <alias name='net1'/>
      <address type='pci' domain='0x0000' bus='0x04' slot='0x00' function='0x0'/>
    </interface>`}.xml(), wants: []found{
		{CodeVhostUser, "vdb", "/var/run/spdk/vhost.0"},
		{CodeVhostUser, "52:54:00:3b:83:1a", "/var/run/openvswitch/vhu0"},
	}},
	{name: "vdpa", xml: guest{devices: `
    <disk type='vhostvdpa' device='disk'>
      <driver name='qemu' type='raw' cache='none' io='threads'/>
      <source dev='/dev/vhost-vdpa-1'/>
      <target dev='vdc' bus='virtio'/>
      <alias name='virtio-disk2'/>
    </disk>
    <interface type='vdpa'>
      <mac address='52:54:00:11:22:33'/>
      <source dev='/dev/vhost-vdpa-0'/>
      <model type='virtio'/>
      <alias name='net0'/>
      <address type='pci' domain='0x0000' bus='0x03' slot='0x00' function='0x0'/>
    </interface>`}.xml(), wants: []found{
		{CodeVhostVDPA, "vdc", "/dev/vhost-vdpa-1"},
		{CodeVhostVDPA, "52:54:00:11:22:33", "/dev/vhost-vdpa-0"},
	}},

	// TPMs.
	{name: "tpm passthrough", xml: guest{devices: `
    <tpm model='tpm-tis'>
      <backend type='passthrough'>
        <device path='/dev/tpm0'/>
      </backend>
      <alias name='tpm0'/>
    </tpm>`}.xml(), wants: []found{{CodeTPMPassthrough, "tpm-tis", "/dev/tpm0"}}},
	{name: "tpm with persistent state", xml: guest{devices: `
    <tpm model='tpm-crb'>
      <backend type='emulator' version='2.0' persistent_state='yes'/>
      <alias name='tpm0'/>
    </tpm>`}.xml(), wants: []found{{CodeTPMPersistent, "tpm-crb", ""}}},
	{name: "tpm emulated", xml: guest{devices: `
    <tpm model='tpm-crb'>
      <backend type='emulator' version='2.0'/>
      <alias name='tpm0'/>
    </tpm>`}.xml()},
	{name: "tpm external", xml: guest{devices: `
    <tpm model='tpm-tis'>
      <backend type='external'>
        <source type='unix' mode='connect' path='/run/swtpm/plain.sock'/>
      </backend>
      <alias name='tpm0'/>
    </tpm>`}.xml(), wants: []found{{CodeTPMExternal, "tpm-tis", "/run/swtpm/plain.sock"}}},

	// CPUs.
	{name: "host-passthrough", xml: guest{cpu: `
  <cpu mode='host-passthrough' check='none' migratable='on'/>`}.xml(), wants: []found{{CodeCPUHost, "", ""}}},
	{name: "maximum", xml: guest{cpu: `
  <cpu mode='maximum' check='none' migratable='on'/>`}.xml(), wants: []found{{CodeCPUHost, "", ""}}},
	{name: "host-passthrough not migratable", xml: guest{cpu: `
  <cpu mode='host-passthrough' check='none' migratable='off'>
    <topology sockets='1' dies='1' clusters='1' cores='2' threads='1'/>
  </cpu>`}.xml(), wants: []found{
		{CodeCPUInvTSC, "", ""},
		{CodeCPUHost, "", ""},
	}},
	{name: "host-passthrough not migratable with tsc frequency", xml: guest{cpu: `
  <cpu mode='host-passthrough' check='none' migratable='off'/>`, timers: `
    <timer name='tsc' frequency='2994374000'/>`}.xml(), wants: []found{{CodeCPUHost, "", ""}}},
	{name: "invtsc", xml: guest{cpu: `
  <cpu mode='custom' match='exact' check='full'>
    <model fallback='forbid'>Icelake-Server</model>
    <feature policy='require' name='invtsc'/>
  </cpu>`}.xml(), wants: []found{{CodeCPUInvTSC, "", ""}}},
	{name: "invtsc with tsc frequency", xml: guest{cpu: `
  <cpu mode='custom' match='exact' check='full'>
    <model fallback='forbid'>Icelake-Server</model>
    <feature policy='require' name='invtsc'/>
  </cpu>`, timers: `
    <timer name='tsc' frequency='2994374000'/>`}.xml()},
	{name: "invtsc disabled", xml: guest{cpu: `
  <cpu mode='custom' match='exact' check='full'>
    <model fallback='forbid'>Icelake-Server</model>
    <feature policy='disable' name='invtsc'/>
  </cpu>`}.xml()},
	{name: "host-model", xml: guest{cpu: `
  <cpu mode='host-model' check='partial'/>`}.xml()},

	{name: "vsock", xml: guest{devices: `
    <vsock model='virtio'>
      <cid auto='yes' address='3'/>
      <alias name='vsock0'/>
      <address type='pci' domain='0x0000' bus='0x0d' slot='0x00' function='0x0'/>
    </vsock>`}.xml(), wants: []found{{CodeVsock, "3", ""}}},

	// Blocks come first, then warnings, each in the XML's order.
	{name: "order", xml: guest{cpu: `
  <cpu mode='host-passthrough' check='none' migratable='on'/>`, devices: `
    <disk type='file' device='disk'>
      <source file='/var/lib/libvirt/images/a.qcow2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='disk'>
      <source file='/var/lib/libvirt/images/b.qcow2'/>
      <target dev='vdb' bus='virtio'/>
      <transient/>
    </disk>
    <filesystem type='mount'>
      <driver type='virtiofs'/>
      <source dir='/srv/shared'/>
      <target dir='shared'/>
    </filesystem>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source>
        <address domain='0x0000' bus='0x03' slot='0x00' function='0x0'/>
      </source>
    </hostdev>
    <vsock model='virtio'>
      <cid auto='no' address='42'/>
    </vsock>`, tail: `
  <launchSecurity type='sev'>
    <cbitpos>47</cbitpos>
    <reducedPhysBits>1</reducedPhysBits>
    <policy>0x0003</policy>
  </launchSecurity>`}.xml(), wants: []found{
		{CodeTransientDisk, "vdb", "/var/lib/libvirt/images/b.qcow2"},
		{CodeVirtiofs, "shared", "/srv/shared"},
		{CodePCIPassthrough, "0000:03:00.0", ""},
		{CodeLaunchSecurity, "sev", ""},
		{CodeCPUHost, "", ""},
		{CodeLocalDisk, "vda", "/var/lib/libvirt/images/a.qcow2"},
		{CodeLocalDisk, "vdb", "/var/lib/libvirt/images/b.qcow2"},
		{CodeVsock, "42", ""},
	}},
}

func TestReasons(t *testing.T) {
	docs := documentedCodes(t)
	for _, c := range reasonCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReasonsXML(c.xml)
			if err != nil {
				t.Fatal(err)
			}
			if !sameFound(got, c.wants) {
				t.Fatalf("got\n%s\nwant\n%s", describe(got), describeFound(c.wants))
			}
			for _, b := range got {
				if b.Severity != docs[b.Code] {
					t.Errorf("%s has severity %q, its documentation says %q", b.Code, b.Severity, docs[b.Code])
				}
				checkMessage(t, b)
			}
		})
	}
}

// checkMessage holds a message to what an operator reads: one sentence,
// naming the device or path it is about.
func checkMessage(t *testing.T, b api.Blocker) {
	t.Helper()
	m := b.Message
	if !strings.HasSuffix(m, ".") || strings.Count(m, ". ") > 0 || strings.Contains(m, "%!") {
		t.Errorf("%s: %q is not one sentence", b.Code, m)
	}
	if b.Device != "" && !strings.Contains(m, b.Device) && !strings.Contains(m, b.Path) {
		t.Errorf("%s: %q names neither device %q nor path %q", b.Code, m, b.Device, b.Path)
	}
}

func sameFound(got []api.Blocker, want []found) bool {
	if len(got) != len(want) {
		return false
	}
	for i, b := range got {
		if (found{b.Code, b.Device, b.Path}) != want[i] {
			return false
		}
	}
	return true
}

func describe(bs []api.Blocker) string {
	var s strings.Builder
	for _, b := range bs {
		fmt.Fprintf(&s, "  %s %s device=%q path=%q: %s\n", b.Severity, b.Code, b.Device, b.Path, b.Message)
	}
	return s.String()
}

func describeFound(fs []found) string {
	var s strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&s, "  %s device=%q path=%q\n", f.code, f.device, f.path)
	}
	return s.String()
}

// Every code is found by some case above, so none goes untested.
func TestEveryCodeIsExercised(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range reasonCases {
		for _, w := range c.wants {
			seen[w.code] = true
		}
	}
	// Found by ferryd's own check of a guest's XML against what its
	// proxy's targets take (libvirtx.RefusedFeatures), tested there.
	seen[CodeFerryTargetRefuses] = true
	for _, code := range exportedCodes(t) {
		if !seen[code] {
			t.Errorf("no case finds %s", code)
		}
	}
}

func TestReasonsOfNothing(t *testing.T) {
	if got := Reasons(nil); got != nil {
		t.Errorf("Reasons(nil) = %v", got)
	}
}

func TestReasonsXMLSaysWhatIsWrong(t *testing.T) {
	for _, c := range []struct{ xml, want string }{
		{"", "empty"},
		{"  \n", "empty"},
		{"<domain type='kvm'><name>x</name>", "does not parse"},
		{"<network><name>default</name></network>", "domain"},
		{"not xml at all", "does not parse"},
	} {
		_, err := ReasonsXML(c.xml)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReasonsXML(%q) = %v, want an error saying %q", c.xml, err, c.want)
		}
	}
}
