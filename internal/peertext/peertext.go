// Package peertext marks the words another node sent, so that what this
// node records can show them to people while nothing that decides (a
// failure's class, say) ever reads them.
package peertext

import (
	"regexp"
	"strings"
	"unicode"
)

// The marks around a peer's words; a peer cannot send them itself.
const (
	Open  = "‹"
	Close = "›"
)

var unmark = strings.NewReplacer(Open, "", Close, "")

// Quote keeps the printable characters of s, at most n bytes of them (0:
// no limit), and marks them as a peer's words.
func Quote(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, strings.ToValidUTF8(s, ""))
	s = unmark.Replace(s)
	if n > 0 && len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return Open + s + Close
}

// quoted is one quote as Quote makes it: nothing inside can be a mark, so
// a mark in this node's own text (a domain name may hold one) never opens
// a span that runs into a peer's quote.
var quoted = regexp.MustCompile(Open + `[^` + Open + Close + `]*` + Close)

// Strip empties every quote in s: what is left is this node's own account.
func Strip(s string) string { return quoted.ReplaceAllString(s, Open+"…"+Close) }
