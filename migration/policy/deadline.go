package policy

import "time"

// The completion rules: how long a migration may run before it is not
// converging (the guest dirties memory about as fast as it is sent) and
// going on only prolongs the load on both hosts and the link.

// DefaultCompletionTimeoutPerGiB is KubeVirt's completionTimeoutPerGiB.
const DefaultCompletionTimeoutPerGiB = 150 * time.Second

// DrivenDeadlineFloor is the least a migration Ferry drives is given: for
// a small guest, connection setup, a target libvirtd probing QEMU's
// capabilities from a cold cache (16 s on the test bed) and the final
// handshake weigh more than its memory.
const DrivenDeadlineFloor = 5 * time.Minute

// cappedPasses is how many passes over all of memory a bandwidth-capped
// migration is allowed at its cap: pre-copy's first pass sends everything
// and later ones send what was dirtied meanwhile.
const cappedPasses = 3

// DrivenDeadline is how long a migration Ferry drives of a guest with
// memBytes of memory may run, its owner switching or aborting then.
// bandwidthMiBs is its bandwidth cap in MiB/s, 0 for none: a capped
// migration is not aborted for being as slow as it was asked to be.
func DrivenDeadline(memBytes uint64, bandwidthMiBs int) time.Duration {
	d := perGiB(memBytes, DefaultCompletionTimeoutPerGiB)
	if bandwidthMiBs > 0 {
		secs := cappedPasses * float64(memBytes) / (float64(bandwidthMiBs) * (1 << 20))
		d = max(d, time.Duration(secs*float64(time.Second)))
	}
	return max(d, DrivenDeadlineFloor)
}

// Deadline is the policy's completion backstop for a migration of that
// much data, one it does not drive (0: none).
func Deadline(s Settings, dataBytes uint64) time.Duration {
	if s.CompletionTimeoutPerGiB <= 0 || dataBytes == 0 {
		return 0
	}
	return perGiB(dataBytes, s.CompletionTimeoutPerGiB)
}

// perGiB is each GiB of bytes given d.
func perGiB(bytes uint64, d time.Duration) time.Duration {
	return time.Duration(float64(bytes) / (1 << 30) * float64(d))
}
