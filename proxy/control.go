package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"
)

var errControl = errors.New("control request failed")

// ControlRequest is what one ferryd asks of another over the proxy port.
type ControlRequest struct {
	Op        string   `json:"op"` // "register" or "unregister"
	Migration string   `json:"migration"`
	Domain    string   `json:"domain,omitempty"`
	Streams   []string `json:"streams,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	// SocketDir is the source's socket dir: the target QEMU will listen at
	// the same paths, so both nodes must use the same one.
	SocketDir string `json:"socketDir,omitempty"`
}

// ControlResponse answers a ControlRequest.
type ControlResponse struct {
	Error     string                       `json:"error,omitempty"`
	Migration *Migration                   `json:"registration,omitempty"`
	Counters  map[string]map[string]uint64 `json:"counters,omitempty"`
}

func kindByName(name string) (Kind, bool) {
	for _, k := range DataKinds {
		if k.String() == name {
			return k, true
		}
	}
	return 0, false
}

func (p *Proxy) serveControl(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	var req ControlRequest
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&req); err != nil {
		p.reject(c, "malformed_header", "control request: "+err.Error())
		return
	}
	resp := p.control(c, req)
	json.NewEncoder(c).Encode(resp)
}

func (p *Proxy) control(c net.Conn, req ControlRequest) ControlResponse {
	switch req.Op {
	case "register":
		if req.SocketDir != p.cfg.SocketDir {
			return ControlResponse{Error: fmt.Sprintf("proxy socket dirs differ: source uses %s, this node %s (the target QEMU listens at the source's paths; set the same --proxy-socket-dir on every node)", req.SocketDir, p.cfg.SocketDir)}
		}
		var kinds []Kind
		for _, s := range req.Streams {
			k, ok := kindByName(s)
			if !ok {
				return ControlResponse{Error: fmt.Sprintf("unknown stream %q", s)}
			}
			kinds = append(kinds, k)
		}
		m, err := p.Register(req.Migration, req.Domain, kinds)
		if errors.Is(err, ErrShuttingDown) {
			p.reject(c, reasonShuttingDown, err.Error())
		}
		if err != nil {
			return ControlResponse{Error: err.Error()}
		}
		return ControlResponse{Migration: &m}
	case "unregister":
		c := p.Unregister(req.Migration, req.Reason)
		if c == nil {
			return ControlResponse{Error: fmt.Sprintf("migration %s is not registered here", req.Migration)}
		}
		return ControlResponse{Counters: c.Snapshot()}
	}
	p.log.Warn("unknown control request", zap.String("op", req.Op))
	return ControlResponse{Error: fmt.Sprintf("unknown control op %q", req.Op)}
}

// Control sends one request to the proxy at addr and returns its answer.
func (p *Proxy) Control(ctx context.Context, addr string, req ControlRequest) (ControlResponse, error) {
	c, err := p.dialPeer(ctx, addr, Header{Kind: KindControl})
	if err != nil {
		return ControlResponse{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return ControlResponse{}, fmt.Errorf("control request to %s: %w", addr, err)
	}
	var resp ControlResponse
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return ControlResponse{}, fmt.Errorf("control answer from %s: %w", addr, err)
	}
	if resp.Error != "" {
		return resp, fmt.Errorf("%w: target %s: %s", errControl, addr, resp.Error)
	}
	return resp, nil
}

// SocketDir is where this node's migration sockets live.
func (p *Proxy) SocketDir() string { return p.cfg.SocketDir }
