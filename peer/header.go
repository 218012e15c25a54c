package peer

import (
	"errors"
	"fmt"
	"io"
	"regexp"

	"github.com/ferry-vm/ferry/internal/peertext"
)

// Kind names one stream of a migration.
type Kind byte

const (
	// KindControl carries one request of one ferryd to another: prepare,
	// finish or cancel an incoming migration.
	KindControl Kind = 0
	// 1 was libvirt's RPC stream in header version 1. It is not reused, so
	// a peer still sending it is told its header is malformed.
	KindMemory Kind = 2 // QEMU's memory stream (KubeVirt's port 49152), multifd included
	KindDisk   Kind = 3 // QEMU's block migration stream (KubeVirt's port 49153)
)

func (k Kind) String() string {
	switch k {
	case KindControl:
		return "control"
	case KindMemory:
		return "memory"
	case KindDisk:
		return "disk"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// DataKinds are the streams a migration may carry: QEMU's own data, never
// a libvirt connection.
var DataKinds = []Kind{KindMemory, KindDisk}

// The header every connection to the proxy port opens with:
//
//	"FRY" | version (1 byte) | kind (1 byte) | id length (1 byte) | id
//
// The target answers data streams with one status byte (0 = relaying) and,
// on refusal, a length-prefixed reason, so the source learns why before it
// relays anything.
const (
	magic = "FRY"
	// Version 2 carries QEMU's data streams only; the libvirt stream of
	// version 1 is gone, so a version 1 peer is refused as unsupported.
	Version       = 2
	MaxIDLength   = 64
	statusOK      = 0
	statusRefused = 1
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidID reports whether id can name a migration.
func ValidID(id string) error {
	if len(id) == 0 || len(id) > MaxIDLength || !idPattern.MatchString(id) {
		return fmt.Errorf("migration id %q must be 1-%d characters of A-Za-z0-9._- starting with a letter or digit", id, MaxIDLength)
	}
	return nil
}

// Header names the migration and stream of a connection.
type Header struct {
	Kind Kind
	ID   string
}

// ErrMalformed and ErrVersion classify bad headers.
var (
	ErrMalformed = errors.New("malformed header")
	ErrVersion   = errors.New("unsupported header version")
)

// Encode renders the header.
func (h Header) Encode() ([]byte, error) {
	if h.Kind != KindControl {
		if err := ValidID(h.ID); err != nil {
			return nil, err
		}
	}
	b := make([]byte, 0, 6+len(h.ID))
	b = append(b, magic...)
	b = append(b, Version, byte(h.Kind), byte(len(h.ID)))
	return append(b, h.ID...), nil
}

// ReadHeader reads and checks one header.
func ReadHeader(r io.Reader) (Header, error) {
	var fixed [6]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return Header{}, err
	}
	if string(fixed[:3]) != magic {
		return Header{}, fmt.Errorf("%w: does not start with %q", ErrMalformed, magic)
	}
	if fixed[3] != Version {
		return Header{}, fmt.Errorf("%w %d (this ferryd speaks %d)", ErrVersion, fixed[3], Version)
	}
	h := Header{Kind: Kind(fixed[4])}
	if h.Kind != KindControl && h.Kind != KindMemory && h.Kind != KindDisk {
		return Header{}, fmt.Errorf("%w: unknown stream kind %d", ErrMalformed, fixed[4])
	}
	n := int(fixed[5])
	if n > MaxIDLength || (n == 0 && h.Kind != KindControl) {
		return Header{}, fmt.Errorf("%w: migration id length %d", ErrMalformed, n)
	}
	id := make([]byte, n)
	if _, err := io.ReadFull(r, id); err != nil {
		return Header{}, err
	}
	h.ID = string(id)
	if h.Kind != KindControl {
		if err := ValidID(h.ID); err != nil {
			return Header{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	return h, nil
}

// WriteStatus answers a data stream: relaying (refusal empty) or refused
// with a reason, as the source learns it before it relays anything.
func WriteStatus(w io.Writer, refusal string) error {
	if refusal == "" {
		_, err := w.Write([]byte{statusOK})
		return err
	}
	if len(refusal) > 255 {
		refusal = refusal[:255]
	}
	_, err := w.Write(append([]byte{statusRefused, byte(len(refusal))}, refusal...))
	return err
}

// RefusedError is the target's reason for not relaying a stream.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "target proxy refused the stream: " + e.Reason }

// ReadStatus reads the answer byte by byte, unbuffered: whatever follows it
// belongs to the relayed stream.
func ReadStatus(r io.Reader) error {
	var b [1]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return fmt.Errorf("reading the target proxy's answer: %w", err)
	}
	if b[0] == statusOK {
		return nil
	}
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return &RefusedError{Reason: "(no reason given)"}
	}
	reason := make([]byte, b[0])
	io.ReadFull(r, reason)
	return &RefusedError{Reason: peertext.Quote(string(reason), 0)}
}

// MarshalText names the stream in JSON (also as a map key).
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a stream name.
func (k *Kind) UnmarshalText(b []byte) error {
	for _, c := range append([]Kind{KindControl}, DataKinds...) {
		if c.String() == string(b) {
			*k = c
			return nil
		}
	}
	return fmt.Errorf("unknown stream %q", b)
}
