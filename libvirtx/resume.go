package libvirtx

import "strings"

// libvirt resumes a broken post-copy itself with VIR_MIGRATE_POSTCOPY_RESUME
// through the five steps of its protocol, as `virsh migrate
// --postcopy-resume` does; it is the route that leaves the guest untainted.
// The daemon of the migration's target crashed on that route in libvirt
// 11.2 and 11.3 (fixed in 11.4, its NEWS: "Fix virtqemud crash when
// resuming failed post-copy migration"), and a target on those resumes
// through a QMP monitor of Ferry's instead.

// Bounds of the libvirts whose target crashes on libvirt's own resume.
const (
	resumeCrashFrom  = 11_002_000
	resumeCrashUntil = 11_004_000
)

// ResumesPostCopy says whether a target running libvirt of version v (as
// Ping returns it) resumes a broken post-copy by libvirt's own protocol.
func ResumesPostCopy(v uint64) bool {
	return v != 0 && (v < resumeCrashFrom || v >= resumeCrashUntil)
}

// HasRecoveryMonitor says whether a running guest's live XML carries the
// QMP monitor a Ferry target gave it (see WithRecoveryMonitor).
func HasRecoveryMonitor(liveXML string) bool {
	return strings.Contains(liveXML, "id="+recoveryChardev+",")
}
