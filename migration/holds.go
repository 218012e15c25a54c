package migration

import "github.com/ferry-vm/ferry/libvirtx"

// HoldsGuest says whether a domain libvirt lists as active is a copy of
// its guest that runs, or could run again on its own: what a fleet counts
// when it asks whether one guest runs on two nodes, or on none.
//
// A live migration has two active domains of one UUID for its whole
// length, and must not count as two copies:
//
//   - paused/migration is the target's incoming domain while pre-copy runs
//     (libvirt starts it so), and the source from the switch-over until
//     libvirt stops it; and a source a migration left paused, whose
//     target may run the guest (a lost Confirm). libvirt resumes one side
//     only once the other is given up, so neither counts while so paused.
//   - paused/post-copy is the source in post-copy: its vCPUs are gone to
//     the target, which runs the guest (running/post-copy) and counts.
//   - paused/post-copy-failed is either side of a broken post-copy: each
//     holds pages the other lacks and neither can run the guest;
//     FerryVMIPostCopyFailed names it. running/post-copy-failed is the
//     target, whose vCPUs are the guest's only ones: it counts, once.
//
// After pre-copy the source is shut off (migrated) and no longer active.
// Every other paused reason (user, I/O error, save, dump, snapshot, a
// guest starting up, ...) is a whole guest halted, which a resume runs
// again: it counts, and so do a guest shutting down and one suspended to
// RAM. A crashed domain's QEMU runs no guest.
func HoldsGuest(st libvirtx.State, reason int32) bool {
	switch st {
	case libvirtx.StateRunning, libvirtx.StateBlocked, libvirtx.StateShutdown, libvirtx.StatePMSuspended:
		return true
	case libvirtx.StatePaused:
		switch reason {
		case libvirtx.PausedMigration, libvirtx.PausedPostCopy, libvirtx.PausedPostCopyFailed:
			return false
		}
		return true
	}
	return false
}
