package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []Header{{KindMemory, "0123456789abcdef"}, {KindDisk, "a.b_c-d"}, {KindControl, ""}} {
		b, err := h.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadHeader(bytes.NewReader(b))
		if err != nil || got != h {
			t.Fatalf("round trip %+v: got %+v, %v", h, got, err)
		}
	}
}

func TestHeaderRejects(t *testing.T) {
	cases := map[string]struct {
		in   []byte
		want error
	}{
		"garbage":         {[]byte("GET / HTTP/1.1\r\n"), ErrMalformed},
		"newer version":   {[]byte("FRY\x09\x02\x01a"), ErrVersion},
		"version 1":       {[]byte("FRY\x01\x02\x01a"), ErrVersion},
		"libvirt stream":  {[]byte("FRY\x02\x01\x01a"), ErrMalformed},
		"unknown kind":    {[]byte("FRY\x02\x07\x01a"), ErrMalformed},
		"empty id":        {[]byte("FRY\x02\x02\x00"), ErrMalformed},
		"id too long":     {append([]byte("FRY\x02\x02\x41"), bytes.Repeat([]byte("a"), 65)...), ErrMalformed},
		"id with a slash": {[]byte("FRY\x02\x02\x05../ab"), ErrMalformed},
		"truncated":       {[]byte("FRY\x02\x02\x05ab"), io.ErrUnexpectedEOF},
	}
	for name, c := range cases {
		if _, err := ReadHeader(bytes.NewReader(c.in)); !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", name, err, c.want)
		}
	}
	if _, err := (Header{Kind: KindMemory, ID: "bad id"}).Encode(); err == nil {
		t.Error("encoding an invalid id succeeded")
	}
}

func FuzzReadHeader(f *testing.F) {
	f.Add([]byte("FRY\x02\x02\x03abc"))
	f.Add([]byte("FRY\x02\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadHeader(bytes.NewReader(b))
		if err != nil {
			return
		}
		enc, err := h.Encode()
		if err != nil {
			t.Fatalf("accepted header %+v does not encode: %v", h, err)
		}
		if !bytes.HasPrefix(b, enc) {
			t.Fatalf("accepted %q but re-encodes as %q", b, enc)
		}
	})
}

func TestKindNamesInJSON(t *testing.T) {
	b, err := json.Marshal(map[Kind]string{KindMemory: "/x"})
	if err != nil || string(b) != `{"memory":"/x"}` {
		t.Fatalf("%s %v", b, err)
	}
	var back map[Kind]string
	if err := json.Unmarshal(b, &back); err != nil || back[KindMemory] != "/x" {
		t.Fatalf("%v %v", back, err)
	}
}
