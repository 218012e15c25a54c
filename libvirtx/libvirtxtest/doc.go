// Package libvirtxtest is a fake libvirtd for tests: a real unix socket
// speaking libvirt's remote protocol (the packet header, XDR bodies) well
// enough for libvirtx's Dial and Pool and the tracker's sampler to run
// against it unchanged. go-libvirt's own fake (libvirttest) answers over
// an in-memory pipe with canned bytes; ferryd's pool dials a socket by path
// and libvirtx checks every reply's layout, so this one listens where a
// test says and encodes each reply from state the test sets: the domains,
// each one's current and completed job statistics, and the events pushed
// to the clients that subscribed.
//
// It imports nothing of Ferry's: libvirtx's own tests use it, and would
// form an import cycle otherwise. Figures are therefore given as a struct
// the fake reads by field name (libvirtx.JobStats is one), and states and
// events as libvirt's numbers.
//
//	xdr.go        the XDR encoder replies are built with, and the reader
//	              for the few call arguments the fake looks at
//	server.go     the socket, the packet loop, the record of calls and the
//	              hook that answers in the fake's place
//	procedures.go the procedures answered, and how
//	domains.go    the domains and their jobs, as a test sets them
//	jobstats.go   a figures struct turned into libvirt's typed parameters
//	events.go     subscriptions and the events pushed to them
//	keepalive.go  libvirt's keepalive: PONGs, PINGs to clients that ask,
//	              and a freeze that stops the fake as SIGSTOP stops libvirtd
package libvirtxtest
