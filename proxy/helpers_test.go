package proxy

import (
	"crypto/tls"
	"errors"
	"net"
)

func tlsClient(raw net.Conn, p *Proxy) *tls.Conn { return tls.Client(raw, p.tls.clientConfig()) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }
