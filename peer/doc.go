// Package peer is the wire contract between the ferryds of two nodes: the
// header every connection to the proxy port opens with, the control
// requests a source's ferryd may make of a target's and their answers,
// the refusal codes and outcomes the asking side acts on, and Incoming,
// the one interface the target's side of the protocol implements.
//
// It is the contract only, for both sides and their tests to share: the
// proxy (package proxy) serves it and relays the streams, the driver
// (package drive) asks through it and implements Incoming.
package peer
