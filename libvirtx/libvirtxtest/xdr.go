package libvirtxtest

import (
	"encoding/binary"
	"fmt"
	"math"

	libvirt "github.com/digitalocean/go-libvirt"
)

// XDR builds an XDR body item by item (RFC 4506): big-endian words, and
// strings and opaques padded to a multiple of four bytes. go-libvirt's
// encoder is internal to it; replies, events and hand-made packets in
// tests are built with this one.
type XDR struct{ b []byte }

// Bytes is what was built.
func (x *XDR) Bytes() []byte { return x.b }

// U32 appends unsigned ints (and ints' bit patterns, enums, bools).
func (x *XDR) U32(vs ...uint32) *XDR {
	for _, v := range vs {
		x.b = binary.BigEndian.AppendUint32(x.b, v)
	}
	return x
}

// I32 appends an int.
func (x *XDR) I32(v int32) *XDR { return x.U32(uint32(v)) }

// U64 appends an unsigned hyper.
func (x *XDR) U64(v uint64) *XDR {
	x.b = binary.BigEndian.AppendUint64(x.b, v)
	return x
}

// String appends a variable-length string or opaque: its length, then its
// bytes, padded.
func (x *XDR) String(s string) *XDR {
	x.U32(uint32(len(s)))
	return x.Fixed([]byte(s))
}

// Fixed appends a fixed-length opaque, padded.
func (x *XDR) Fixed(b []byte) *XDR {
	x.b = append(x.b, b...)
	x.b = append(x.b, make([]byte, (4-len(b)%4)%4)...)
	return x
}

// Domain appends a remote_nonnull_domain.
func (x *XDR) Domain(name string, uuid libvirt.UUID, id int32) *XDR {
	return x.String(name).Fixed(uuid[:]).I32(id)
}

// Param appends one remote_typed_param, its type told by v's: int32 an
// int, uint32 a uint, int64 a llong, uint64 a ullong, float64 a double,
// bool a boolean, string a string.
func (x *XDR) Param(name string, v any) *XDR {
	x.String(name)
	switch v := v.(type) {
	case int32:
		return x.U32(1).I32(v)
	case uint32:
		return x.U32(2, v)
	case int64:
		return x.U32(3).U64(uint64(v))
	case uint64:
		return x.U32(4).U64(v)
	case float64:
		return x.U32(5).U64(math.Float64bits(v))
	case bool:
		b := uint32(0)
		if v {
			b = 1
		}
		return x.U32(6, b)
	case string:
		return x.U32(7).String(v)
	}
	panic(fmt.Sprintf("libvirtxtest: a typed parameter cannot hold a %T", v))
}

// Words is the XDR of unsigned ints.
func Words(vs ...uint32) []byte { return new(XDR).U32(vs...).Bytes() }

// ErrorBody is the body of a reply with status error: libvirt's
// remote_error, from VIR_FROM_QEMU, with none of the optional fields
// go-libvirt does not read.
func ErrorBody(e libvirt.Error) []byte {
	const fromQEMU, levelError = 10, 2
	x := new(XDR).U32(e.Code, fromQEMU, 1).String(e.Message)
	// level; dom, str1, str2, str3 absent; int1, int2; net absent.
	return x.U32(levelError, 0, 0, 0, 0, 0, 0, 0).Bytes()
}

// Flags is the trailing unsigned int most calls' arguments end with.
func Flags(args []byte) uint32 {
	if len(args) < 4 {
		return ^uint32(0)
	}
	return binary.BigEndian.Uint32(args[len(args)-4:])
}

// argReader reads the leading items of a call's arguments; a short read
// gives zeros, which name no domain.
type argReader struct{ b []byte }

func (r *argReader) u32() uint32 {
	if len(r.b) < 4 {
		r.b = nil
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *argReader) skip(n int) {
	if n > len(r.b) {
		n = len(r.b)
	}
	r.b = r.b[n:]
}

func (r *argReader) string() string {
	n := int(r.u32())
	padded := (n + 3) &^ 3
	if padded > len(r.b) {
		r.b = nil
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[padded:]
	return s
}

// domainName is the name of the remote_nonnull_domain most domain calls'
// arguments start with.
func domainName(args []byte) string {
	r := argReader{args}
	return r.string()
}
