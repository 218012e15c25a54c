package main

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// splitEndpoint reads "tcp:HOST:PORT" or "unix:PATH", so one flag can name
// either end of the raw TCP and the relayed paths.
func splitEndpoint(s string) (network, addr string, err error) {
	network, addr, ok := strings.Cut(s, ":")
	if !ok || (network != "tcp" && network != "unix") || addr == "" {
		return "", "", fmt.Errorf("endpoint %q is not tcp:HOST:PORT or unix:PATH", s)
	}
	return network, addr, nil
}

func listenEndpoint(s string) (net.Listener, error) {
	network, addr, err := splitEndpoint(s)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		os.Remove(addr) // left by an earlier run that was killed
	}
	return net.Listen(network, addr)
}
