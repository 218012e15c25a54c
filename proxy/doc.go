// Package proxy is Ferry's migration socket proxy between KVM hosts.
//
// A live migration's QEMU streams, memory (with any number of parallel
// multifd connections) and disk, each leave the source host through a unix
// socket. The source side accepts them, opens a connection to the target
// node's single proxy port, names the migration and the stream in a small
// versioned header, and relays bytes. The target relays a stream only for a
// migration it prepared itself, only to the socket its own QEMU listens on,
// and only as many connections as that migration was prepared for. No
// libvirt connection ever crosses the proxy: a peer may only ask, over a
// control stream, to prepare, finish or cancel one incoming migration,
// which the target runs on its own libvirt through Incoming. Between nodes
// the connection is mutual TLS by default; on a trusted network without TLS
// the bytes move with splice(2) and never enter user space. The wire
// contract it serves (the header, the control requests and their answers,
// Incoming) is package peer's.
package proxy
