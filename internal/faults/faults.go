// Package faults injects faults into a ferryd built for the end-to-end
// tests (the ferry_faults build tag), where FERRY_FAULTS names them. Every
// other build injects none.
package faults

// Inject says whether the named fault is to be injected now.
var Inject = func(name string) bool { return false }

// The faults a ferryd can be told to inject.
const (
	// DropFinishAnswer: the target finishes a migration and its answer
	// never reaches the source.
	DropFinishAnswer = "drop-finish-answer"
	// LatePrepare: the target gives up on libvirt's Prepare at once, so
	// that libvirt's answer arrives after ferryd stopped waiting.
	LatePrepare = "late-prepare"
	// PauseAfterBegin: the source holds a migration a few seconds between
	// libvirt's Begin and the target's Prepare, the window in which a
	// definition change would make the target's copy stale.
	PauseAfterBegin = "pause-after-begin"
	// PauseBeforePerform: the source holds a migration a few seconds
	// after the target prepared it and before Perform, the window in
	// which a direct migration's target QEMU listens for anyone.
	PauseBeforePerform = "pause-before-perform"
	// PauseBeforeFinish: the source holds a pre-copy migration a few
	// seconds after its Perform returned and before the target's Finish,
	// the window in which the target's guest is paused, whole, and has
	// never run there.
	PauseBeforeFinish = "pause-before-finish"
	// SlowReturnPath: the target holds each read from its QEMU's memory
	// stream a few seconds before relaying it to the source, widening the
	// window between the target QEMU's end of a post-copy and the
	// source's hearing of it, in which a lost stream fails the migration
	// on the source instead of pausing it.
	SlowReturnPath = "slow-return-path"
)
