// Package libvirtx is Ferry's access to libvirt: connections to one or more
// libvirt sockets over go-libvirt's pure-Go RPC, with the deadlines,
// health checks and reconnects that go-libvirt itself does not provide, and
// typed views (job stats, domain states, events) of what libvirt reports.
package libvirtx
