package preflight

import "strings"

// guest is a running domain's XML as libvirt writes it: a plain guest
// booted from a kernel and initrd, with no disks, a virtio console and a
// balloon, and room for what a test adds. Its CPU is host-model as the
// live XML shows it, already expanded to a named model.
type guest struct {
	memoryBacking string
	cpu           string
	timers        string
	devices       string
	tail          string
}

const hostModelCPU = `<cpu mode='custom' match='exact' check='full'>
    <model fallback='forbid'>EPYC-Rome</model>
    <vendor>AMD</vendor>
    <topology sockets='1' dies='1' clusters='1' cores='2' threads='1'/>
    <feature policy='require' name='x2apic'/>
    <feature policy='require' name='tsc-deadline'/>
    <feature policy='require' name='hypervisor'/>
    <feature policy='require' name='stibp'/>
    <feature policy='disable' name='svm'/>
  </cpu>`

const guestTemplate = `<domain type='kvm' id='7'>
  <name>plain</name>
  <uuid>6f1c1d7e-2b8a-4c51-9a3e-1f6d2b7c9e01</uuid>
  <memory unit='KiB'>524288</memory>
  <currentMemory unit='KiB'>524288</currentMemory>
  {{memoryBacking}}
  <vcpu placement='static'>2</vcpu>
  <resource>
    <partition>/machine</partition>
  </resource>
  <os>
    <type arch='x86_64' machine='pc-q35-8.2'>hvm</type>
    <kernel>/var/lib/ferry/guest/vmlinuz</kernel>
    <initrd>/var/lib/ferry/guest/initramfs.img</initrd>
    <cmdline>console=hvc0 quiet</cmdline>
    <boot dev='hd'/>
  </os>
  <features>
    <acpi/>
    <apic/>
  </features>
  {{cpu}}
  <clock offset='utc'>
    <timer name='rtc' tickpolicy='catchup'/>
    <timer name='pit' tickpolicy='delay'/>
    <timer name='hpet' present='no'/>
    {{timers}}
  </clock>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    {{devices}}
    <controller type='pci' index='0' model='pcie-root'>
      <alias name='pcie.0'/>
    </controller>
    <controller type='virtio-serial' index='0'>
      <alias name='virtio-serial0'/>
      <address type='pci' domain='0x0000' bus='0x01' slot='0x00' function='0x0'/>
    </controller>
    <console type='pty' tty='/dev/pts/3'>
      <source path='/dev/pts/3'/>
      <target type='virtio' port='0'/>
      <alias name='console0'/>
    </console>
    <memballoon model='virtio'>
      <alias name='balloon0'/>
      <address type='pci' domain='0x0000' bus='0x02' slot='0x00' function='0x0'/>
    </memballoon>
  </devices>
  <seclabel type='dynamic' model='dac' relabel='yes'>
    <label>+64055:+994</label>
    <imagelabel>+64055:+994</imagelabel>
  </seclabel>
  {{tail}}
</domain>`

func (g guest) xml() string {
	cpu := g.cpu
	if cpu == "" {
		cpu = hostModelCPU
	}
	return strings.NewReplacer(
		"{{memoryBacking}}", g.memoryBacking,
		"{{cpu}}", cpu,
		"{{timers}}", g.timers,
		"{{devices}}", g.devices,
		"{{tail}}", g.tail,
	).Replace(guestTemplate)
}

// kubevirtDomain is a virt-launcher's live domain: a PVC-backed root disk
// and a cloud-init disk on the pod's filesystem, a Ceph RBD disk, and the
// devices KubeVirt always adds (tap interface, serial and agent sockets,
// VNC, balloon, RNG).
const kubevirtDomain = `<domain type='kvm' id='1'>
  <name>default_vmi-fedora</name>
  <uuid>3a4e2b8c-7f1d-5e6a-9b0c-2d4f6e8a1c3b</uuid>
  <metadata>
    <kubevirt xmlns="http://kubevirt.io">
      <uid>9f2b6c1e-4d3a-4b7e-8c5f-1a2b3c4d5e6f</uid>
    </kubevirt>
  </metadata>
  <memory unit='KiB'>2097152</memory>
  <currentMemory unit='KiB'>2097152</currentMemory>
  <vcpu placement='static'>1</vcpu>
  <iothreads>1</iothreads>
  <sysinfo type='smbios'>
    <system>
      <entry name='manufacturer'>KubeVirt</entry>
      <entry name='product'>None</entry>
      <entry name='uuid'>3a4e2b8c-7f1d-5e6a-9b0c-2d4f6e8a1c3b</entry>
      <entry name='family'>KubeVirt</entry>
    </system>
  </sysinfo>
  <os>
    <type arch='x86_64' machine='pc-q35-rhel9.4.0'>hvm</type>
    <boot dev='hd'/>
    <smbios mode='sysinfo'/>
  </os>
  <features>
    <acpi/>
  </features>
  <cpu mode='custom' match='exact' check='full'>
    <model fallback='forbid'>Skylake-Client-IBRS</model>
    <vendor>Intel</vendor>
    <topology sockets='1' dies='1' clusters='1' cores='1' threads='1'/>
    <feature policy='require' name='ss'/>
    <feature policy='require' name='vmx'/>
    <feature policy='disable' name='mpx'/>
    <numa>
      <cell id='0' cpus='0' memory='2097152' unit='KiB'/>
    </numa>
  </cpu>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/libexec/qemu-kvm</emulator>
    <disk type='file' device='disk' model='virtio-non-transitional'>
      <driver name='qemu' type='raw' cache='none' error_policy='stop' discard='unmap'/>
      <source file='/var/run/kubevirt-private/vmi-disks/rootdisk/disk.img' index='3'/>
      <backingStore/>
      <target dev='vda' bus='virtio'/>
      <alias name='ua-rootdisk'/>
      <address type='pci' domain='0x0000' bus='0x07' slot='0x00' function='0x0'/>
    </disk>
    <disk type='network' device='disk' model='virtio-non-transitional'>
      <driver name='qemu' type='raw' cache='none' error_policy='stop' discard='unmap'/>
      <auth username='kubevirt'>
        <secret type='ceph' usage='client.kubevirt secret'/>
      </auth>
      <source protocol='rbd' name='kubevirt-pool/vmi-fedora-data' index='2'>
        <host name='10.0.0.11' port='6789'/>
        <host name='10.0.0.12' port='6789'/>
      </source>
      <target dev='vdc' bus='virtio'/>
      <alias name='ua-datadisk'/>
      <address type='pci' domain='0x0000' bus='0x08' slot='0x00' function='0x0'/>
    </disk>
    <disk type='file' device='disk' model='virtio-non-transitional'>
      <driver name='qemu' type='raw' cache='none' error_policy='stop' discard='unmap'/>
      <source file='/var/run/kubevirt-ephemeral-disks/cloud-init-data/default/vmi-fedora/noCloud.iso' index='1'/>
      <backingStore/>
      <target dev='vdb' bus='virtio'/>
      <alias name='ua-cloudinitdisk'/>
      <address type='pci' domain='0x0000' bus='0x09' slot='0x00' function='0x0'/>
    </disk>
    <controller type='usb' index='0' model='qemu-xhci'>
      <alias name='usb'/>
      <address type='pci' domain='0x0000' bus='0x05' slot='0x00' function='0x0'/>
    </controller>
    <controller type='scsi' index='0' model='virtio-non-transitional'>
      <alias name='scsi0'/>
      <address type='pci' domain='0x0000' bus='0x02' slot='0x00' function='0x0'/>
    </controller>
    <controller type='virtio-serial' index='0' model='virtio-non-transitional'>
      <alias name='virtio-serial0'/>
      <address type='pci' domain='0x0000' bus='0x03' slot='0x00' function='0x0'/>
    </controller>
    <interface type='ethernet'>
      <mac address='02:41:83:00:00:01'/>
      <target dev='tap0' managed='no'/>
      <model type='virtio-non-transitional'/>
      <driver name='vhost'/>
      <mtu size='1450'/>
      <alias name='ua-default'/>
      <rom enabled='no'/>
      <address type='pci' domain='0x0000' bus='0x01' slot='0x00' function='0x0'/>
    </interface>
    <serial type='unix'>
      <source mode='bind' path='/var/run/kubevirt-private/9f2b6c1e-4d3a-4b7e-8c5f-1a2b3c4d5e6f/virt-serial0'/>
      <log file='/var/run/kubevirt-private/9f2b6c1e-4d3a-4b7e-8c5f-1a2b3c4d5e6f/virt-serial0-log' append='on'/>
      <target type='isa-serial' port='0'>
        <model name='isa-serial'/>
      </target>
      <alias name='serial0'/>
    </serial>
    <console type='unix'>
      <source mode='bind' path='/var/run/kubevirt-private/9f2b6c1e-4d3a-4b7e-8c5f-1a2b3c4d5e6f/virt-serial0'/>
      <target type='serial' port='0'/>
      <alias name='serial0'/>
    </console>
    <channel type='unix'>
      <source mode='bind' path='/var/run/libvirt/qemu/run/channel/1-default_vmi-fedora/org.qemu.guest_agent.0'/>
      <target type='virtio' name='org.qemu.guest_agent.0' state='connected'/>
      <alias name='channel0'/>
      <address type='virtio-serial' controller='0' bus='0' port='1'/>
    </channel>
    <input type='tablet' bus='usb'>
      <alias name='ua-tablet'/>
      <address type='usb' bus='0' port='1'/>
    </input>
    <input type='mouse' bus='ps2'>
      <alias name='input1'/>
    </input>
    <input type='keyboard' bus='ps2'>
      <alias name='input2'/>
    </input>
    <graphics type='vnc' socket='/var/run/kubevirt-private/9f2b6c1e-4d3a-4b7e-8c5f-1a2b3c4d5e6f/virt-vnc'>
      <listen type='socket' socket='/var/run/kubevirt-private/9f2b6c1e-4d3a-4b7e-8c5f-1a2b3c4d5e6f/virt-vnc'/>
    </graphics>
    <audio id='1' type='none'/>
    <video>
      <model type='vga' vram='16384' heads='1' primary='yes'/>
      <alias name='video0'/>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x01' function='0x0'/>
    </video>
    <memballoon model='virtio-non-transitional' freePageReporting='on'>
      <stats period='10'/>
      <alias name='balloon0'/>
      <address type='pci' domain='0x0000' bus='0x06' slot='0x00' function='0x0'/>
    </memballoon>
    <rng model='virtio-non-transitional'>
      <backend model='random'>/dev/urandom</backend>
      <alias name='rng0'/>
      <address type='pci' domain='0x0000' bus='0x04' slot='0x00' function='0x0'/>
    </rng>
  </devices>
  <seclabel type='dynamic' model='selinux' relabel='yes'>
    <label>system_u:system_r:container_t:s0:c107,c538</label>
    <imagelabel>system_u:object_r:container_file_t:s0:c107,c538</imagelabel>
  </seclabel>
  <seclabel type='dynamic' model='dac' relabel='yes'>
    <label>+107:+107</label>
    <imagelabel>+107:+107</imagelabel>
  </seclabel>
</domain>`
