package preflight

import (
	"slices"
	"testing"

	"libvirt.org/go/libvirtxml"
)

func TestLocalDisks(t *testing.T) {
	var def libvirtxml.Domain
	if err := def.Unmarshal(kubevirtDomain); err != nil {
		t.Fatal(err)
	}
	want := []Disk{
		{Target: "vda", Path: "/var/run/kubevirt-private/vmi-disks/rootdisk/disk.img", Device: "disk"},
		{Target: "vdb", Path: "/var/run/kubevirt-ephemeral-disks/cloud-init-data/default/vmi-fedora/noCloud.iso", Device: "disk"},
	}
	got := LocalDisks(&def)
	if len(got) != len(want) {
		t.Fatalf("LocalDisks = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Target != want[i].Target || got[i].Path != want[i].Path || got[i].Device != want[i].Device {
			t.Errorf("LocalDisks[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	if LocalDisks(nil) != nil || LocalDisks(&libvirtxml.Domain{}) != nil {
		t.Error("a domain without devices has local disks")
	}
}

// LocalDisks lists exactly the disks Reasons reports as local, so that the
// caller sizes every one it shows and no other.
func TestLocalDisksAreTheReportedOnes(t *testing.T) {
	for _, c := range reasonCases {
		var def libvirtxml.Domain
		if err := def.Unmarshal(c.xml); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var reported, listed []string
		for _, b := range Reasons(&def) {
			if b.Code == CodeLocalDisk {
				reported = append(reported, b.Device+" "+b.Path)
			}
		}
		for _, d := range LocalDisks(&def) {
			listed = append(listed, d.Target+" "+d.Path)
		}
		slices.Sort(reported)
		slices.Sort(listed)
		if !slices.Equal(reported, listed) {
			t.Errorf("%s: Reasons reports local disks %q, LocalDisks lists %q", c.name, reported, listed)
		}
	}
}

func TestLocalDiskDevices(t *testing.T) {
	var def libvirtxml.Domain
	xml := guest{devices: `
    <disk type='file' device='cdrom'>
      <source file='/var/lib/libvirt/images/install.iso'/>
      <target dev='sda' bus='sata'/>
      <readonly/>
    </disk>
    <disk type='block' device='lun'>
      <source dev='/dev/sdc'/>
      <target dev='sdb' bus='scsi'/>
    </disk>
    <disk type='file'>
      <source file='/var/lib/libvirt/images/plain.img'/>
      <target dev='vda' bus='virtio'/>
    </disk>`}.xml()
	if err := def.Unmarshal(xml); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range LocalDisks(&def) {
		got = append(got, d.Target+":"+d.Device)
	}
	if want := []string{"sda:cdrom", "sdb:lun", "vda:disk"}; !slices.Equal(got, want) {
		t.Errorf("devices %q, want %q", got, want)
	}
}
