package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
)

// The KubeVirt-style relay mirrors the design of virt-handler's migration
// proxy, the baseline Ferry is meant to beat: one TCP port per stream, and
// per connection two goroutines each running a plain io.Copy, with no
// buffer tuning and no half-close passed on.

// kvSourceMain accepts the stream on a unix socket and dials the target
// node for each connection.
func kvSourceMain(args []string) error {
	fs := flag.NewFlagSet("kv-source", flag.ContinueOnError)
	listen := fs.String("listen", "", "unix socket path the writer connects to")
	target := fs.String("target", "", "the target relay's host:port")
	tlsDir := fs.String("tls", "", "directory with tls.crt, tls.key and ca.crt; empty for plain TCP")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := profileRelay("kv-source"); err != nil {
		return err
	}
	dial := func() (net.Conn, error) { return net.Dial("tcp", *target) }
	if *tlsDir != "" {
		cert, pool, err := loadTLS(*tlsDir)
		if err != nil {
			return err
		}
		conf := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: peerName}
		dial = func() (net.Conn, error) { return tls.Dial("tcp", *target, conf) }
	}
	ln, err := listenEndpoint("unix:" + *listen)
	if err != nil {
		return err
	}
	return kvServe(ln, dial)
}

// kvTargetMain accepts the stream on its TCP port and dials the local
// unix socket for each connection.
func kvTargetMain(args []string) error {
	fs := flag.NewFlagSet("kv-target", flag.ContinueOnError)
	listen := fs.String("listen", "", "host:port to accept the source relay on")
	target := fs.String("target", "", "unix socket path of the receiving end")
	tlsDir := fs.String("tls", "", "directory with tls.crt, tls.key and ca.crt; empty for plain TCP")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := profileRelay("kv-target"); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *tlsDir != "" {
		cert, pool, err := loadTLS(*tlsDir)
		if err != nil {
			return err
		}
		ln = tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool})
	}
	return kvServe(ln, func() (net.Conn, error) { return net.Dial("unix", *target) })
}

func kvServe(ln net.Listener, dial func() (net.Conn, error)) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go kvRelay(c, dial)
	}
}

// kvRelay ends both connections as soon as either direction ends, as the
// relay it stands in for does.
func kvRelay(in net.Conn, dial func() (net.Conn, error)) {
	defer in.Close()
	out, err := dial()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kv relay: %v\n", err)
		return
	}
	defer out.Close()
	ended := make(chan struct{}, 2)
	go func() { io.Copy(out, in); ended <- struct{}{} }()
	go func() { io.Copy(in, out); ended <- struct{}{} }()
	<-ended
}
