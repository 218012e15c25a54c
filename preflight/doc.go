// Package preflight says whether a domain can move to another host, and
// why not: it reads, from a running domain's XML, the reasons libvirt or
// QEMU would refuse to live-migrate it that the XML shows, and the
// reasons the move needs care first. It does no I/O; asking libvirt for
// the XML, for disk sizes and for its own answer (QEMU's migration
// blockers) is the caller's.
//
// Each reason is an api.Blocker with a stable code. A code that blocks
// means the domain cannot be live-migrated while it holds that; one that
// warns means it can move only where the target, or the migration's
// options, provide what it needs. Every code, its severity and meaning:
//
//   - pci_passthrough (blocks): a host PCI device (<hostdev type='pci'>,
//     or <interface type='hostdev'>, an SR-IOV VF) is passed through. Its
//     state is in the hardware, which stays here; only a VFIO driver with
//     migration support could move it. Device is the PCI address.
//   - pci_failover (warns): a passed-through VF is half of a failover pair
//     (<teaming type='transient'>). QEMU unplugs it before migrating and
//     the guest runs on its virtio standby; it gets a VF back only if the
//     target has one. Device is the PCI address.
//   - mdev (blocks): a mediated device (a vGPU or other slice of a host
//     device) is tied to this host's hardware. Some vendors' drivers can
//     migrate one; libvirt and KubeVirt refuse unless they do. Device is
//     the mdev UUID.
//   - host_device (blocks): another host device is given to the guest:
//     USB (the guest keeps it only if the target has the same device
//     plugged in), SCSI, vhost-scsi, or a hostdev in capabilities mode,
//     which libvirt refuses to migrate.
//   - launch_security (blocks): the guest's memory is encrypted (AMD SEV,
//     SEV-SNP, Intel TDX, IBM Secure Execution) with keys of this host's
//     processor and firmware; QEMU cannot read it to send it. Device is the
//     type.
//   - virtiofs (blocks): a host directory is shared through virtiofs,
//     whose daemon holds the guest's open files; libvirt refuses to
//     migrate it. Device is the mount tag, Path the directory.
//   - host_filesystem (blocks): a host directory is exported over 9p (or
//     another host filesystem is given); QEMU refuses to migrate while the
//     guest has a 9p export mounted. Device is the mount tag, Path the
//     directory.
//   - shared_memory (blocks): an ivshmem region is shared with processes of
//     this host and the guest does not own it; libvirt migrates only a
//     region with role='master'. Device is the region's name.
//   - shared_memory_master (warns): an ivshmem region the guest owns
//     (role='master') moves with it, but the processes sharing it on this
//     host stay behind.
//   - persistent_reservations (blocks): a disk uses SCSI persistent
//     reservations, held by the storage for this host's initiator, and the
//     domain does not ask QEMU to carry them (<reservations migration='yes'>).
//   - vhost_user (blocks): an interface or disk is served by a vhost-user
//     backend on this host (a userspace switch, a storage daemon); QEMU
//     moves only its own side. Path is the socket. An interface whose
//     backend is passt is not reported: libvirt starts passt on the target.
//   - vhost_vdpa (blocks): an interface or disk is a vDPA device of this
//     host, whose datapath state is in the device. Path is the device.
//   - tpm_passthrough (blocks): the guest uses this host's own TPM chip.
//   - tpm_persistent (warns): the emulated TPM's state is kept on this
//     host's disk beyond the guest (persistent_state='yes'). The live state
//     moves with the migration; the kept copy needs shared storage.
//   - tpm_external (warns): the TPM is an swtpm run outside libvirt; the
//     target needs its own at the same socket. Path is the socket.
//   - transient_disk (blocks): a disk is transient (<transient/>), its
//     writes going to an overlay on this host; libvirt refuses to migrate.
//   - block_job (blocks): a block copy or active commit runs on a disk
//     (the live XML shows its <mirror>); libvirt refuses to migrate until
//     it ends. Path is the copy's destination.
//   - cpu_invtsc (blocks): the guest's CPU has invariant TSC, asked for or
//     passed through with migratable='off', and no TSC frequency is set;
//     QEMU refuses to migrate it.
//   - cpu_host (warns): the guest sees this host's CPU as it is
//     (host-passthrough or maximum); it can move only to a host with an
//     identical CPU, microcode and kernel.
//   - vsock (warns): the guest has a vsock CID, which it keeps; the
//     migration fails if a guest on the target holds the same. Device is
//     the CID.
//   - local_disk (warns): a disk's data is a file, block device, directory,
//     pool volume or NVMe namespace of this host, or a server behind a unix
//     socket here. It moves only on shared storage or copied by the
//     migration, and a migration copies no read-only or shareable disk.
//     Device is the target (vda), Path the source; LocalDisks lists them
//     so their sizes can be asked of libvirt. Network disks (rbd, iscsi,
//     nbd, gluster) and empty drives are not reported, nor is a disk both
//     read-only and shareable.
//   - ferry_target_refuses (warns): the guest has what no Ferry target
//     takes through its proxy, whatever its options (huge pages, pins to
//     host CPUs or NUMA nodes, cache allocation, SCSI pass-through,
//     persistent reservations...): it moves only by other means (libvirt's
//     own migration, KubeVirt's). Reported by ferryd for its node's own
//     libvirt only, never for a KubeVirt launcher's guests, which KubeVirt
//     moves, nor for a guest something here already blocks. Device is
//     empty; the message names what.
//
// Not reported: host-model and custom CPUs (the live XML names a model
// the target is checked against), <memoryBacking><access mode='shared'>
// (vhost-user needs it; it is no reason on its own), NVRAM (QEMU sends
// the firmware's variables in the stream), and what the XML does not show:
// snapshots, block jobs other than copies, a shared filesystem under a
// local path, and the blockers only QEMU knows.
package preflight
