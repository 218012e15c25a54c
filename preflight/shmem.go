package preflight

import (
	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
)

// shmemReasons follows libvirt, which migrates an ivshmem region only
// when the guest owns it (role='master'): QEMU then sends its contents,
// while a peer's copy would be overwritten by, or go stale against, the
// processes sharing it. memoryBacking's shared access is no reason: it
// shares the guest's RAM with a vhost-user backend, which moves with it.
func shmemReasons(s *libvirtxml.DomainShmem) []api.Blocker {
	path := ""
	if s.Server != nil {
		path = s.Server.Path
	}
	if s.Role == "master" {
		return []api.Blocker{blocker(CodeSharedMemoryMaster, s.Name, path,
			"Shared memory region %s (ivshmem) moves with the guest, which owns it (role='master'), but the processes sharing it on this host stay here and no longer see the guest's writes.", s.Name)}
	}
	role := "this one has none"
	if s.Role != "" {
		role = "this one's is '" + s.Role + "'"
	}
	return []api.Blocker{blocker(CodeSharedMemory, s.Name, path,
		"Shared memory region %s (ivshmem) is shared with other processes on this host: libvirt migrates only a region whose role is 'master', and %s.", s.Name, role)}
}
