package main

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// clean makes text that ferryd relays from outside its control (libvirt's
// errors, a pod's domain names, a peer's answers) safe for a terminal: a
// hostile pod must not clear the operator's screen, rewrite lines, set the
// title or the clipboard. What a terminal could act on (C0 and C1
// controls, DEL, invalid UTF-8, and format characters such as bidi
// overrides, which reorder what is shown) is written out as Go escapes,
// so the operator still sees it; a newline too, as one field must not
// forge a line. Tabs become spaces, to keep table columns.
func clean(s string) string {
	if printableASCII(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\t':
			b.WriteByte(' ')
		case unicode.IsGraphic(r) && (r != utf8.RuneError || n > 1):
			b.WriteString(s[i : i+n])
		default:
			// Quote escapes a lone invalid byte as \xNN and any other rune
			// it is given here as \n, \x1b, \u009b...
			q := strconv.Quote(s[i : i+n])
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// printableASCII is clean's fast path, the common case.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
