package kubevirt

import "unicode/utf8"

// maxText bounds the failure reason and message Ferry writes into a VMI's
// annotation and Event: they come from libvirt and QEMU, which a guest's
// launcher pod controls, and land in the VMI owner's namespace.
const maxText = 1024

// capText cuts s to at most maxText bytes, ending with an ellipsis when
// cut, never inside a UTF-8 sequence.
func capText(s string) string {
	if len(s) <= maxText {
		return s
	}
	const ellipsis = "…"
	cut := maxText - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
