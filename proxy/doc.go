// Package proxy is Ferry's migration socket proxy between KVM hosts.
//
// A live migration's libvirt RPC stream, memory stream (with any number of
// parallel multifd connections) and disk stream each leave the source host
// through a unix socket. The source side accepts them, opens a connection to
// the target node's single proxy port, names the migration and the stream in
// a small versioned header, and relays bytes; the target side relays a
// stream only for a migration registered on it, and only to that
// migration's own sockets. Between nodes the connection is mutual TLS by
// default; on a trusted network without TLS the bytes move with splice(2)
// and never enter user space.
package proxy
