package drive

// multifdWithPostCopy says why a migration cannot have multifd (parallel
// connections, and the compression on them) together with post-copy, ""
// if it does not ask for both. QEMU 10.0 refuses the pair outright. QEMU
// 10.1 takes it, but through Ferry's proxy its target QEMU was stopped
// right after the switch (zstd on two channels, QEMU 11.1, see
// docs/support.md): the guest's memory split, with no target left to
// resume it. Refused on every QEMU until the proxy carries it.
func multifdWithPostCopy(multifd, postCopy bool) string {
	if !multifd || !postCopy {
		return ""
	}
	return "multifd (parallel connections, and the compression on them) cannot be had with post-copy: QEMU 10.0 refuses the pair, " +
		"and through Ferry's proxy a QEMU 11.1 target was stopped at the switch"
}
