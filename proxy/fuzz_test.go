package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

// Control requests as a peer sends them, after their header: the proxy
// never panics, and answers with one well-formed response or hangs up.
func FuzzControlRequest(f *testing.F) {
	f.Add([]byte(`{"op":"prepare","migration":"m","domain":"vm","xml":"<domain/>","flags":1}`))
	f.Add([]byte(`{"op":"finish","migration":"m","domain":"vm","cookie":"AAAA","cancelled":true}`))
	f.Add([]byte(`{"op":"cancel","migration":"../../x","domain":"vm"}`))
	f.Add([]byte(`{"op":"prepare","migration":"m","domain":"vm","parallel":100000,"deadlineSeconds":-1e308}`))
	f.Add([]byte(`{"op":"prepare","op":"cancel"}{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		dst := startNode(t, nil)
		c, err := net.Dial("tcp", dst.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hb, _ := peer.Header{Kind: peer.KindControl}.Encode()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		go func() {
			c.Write(append(hb, body...))
			// A request cut short ends with the connection's write side.
			c.(*net.TCPConn).CloseWrite()
		}()
		out, err := io.ReadAll(c)
		if errors.Is(err, syscall.ECONNRESET) {
			// Closed with the rest of a refused request unread: a reset,
			// as TCP has it.
			return
		}
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		if len(out) == 0 {
			return
		}
		var resp peer.ControlResponse
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&resp); err != nil || dec.More() {
			t.Fatalf("answer is not one control response (%v): %q", err, out)
		}
	})
}
