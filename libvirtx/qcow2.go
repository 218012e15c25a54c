package libvirtx

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// A qcow2 image names its backing image in its own header, which QEMU
// follows when libvirt was not told the chain (a shut-off domain's XML
// never is): another guest's data up to a snapshot lives there.

// qcow2Magic opens every qcow2 header ("QFI\xfb").
const qcow2Magic = 0x514649fb

// maxBackingName and maxBackingDepth bound what a header is taken for.
const (
	maxBackingName  = 4096
	maxBackingDepth = 16
)

// backingChains are the backing images the qcow2 images at paths name,
// down each chain, as their headers say. An image that cannot be read,
// or is not qcow2, ends its chain.
func backingChains(paths []string) []string {
	var out []string
	for _, p := range paths {
		out = append(out, lookupWithin(&chainLookups, p, func() []string { return backingChain(p) }, nil)...)
	}
	return out
}

// backingChain is the chain under one qcow2 image.
func backingChain(p string) []string {
	var out []string
	for range maxBackingDepth {
		next, more, ok := qcow2Backing(p)
		if !ok {
			break
		}
		out = append(out, next)
		if !more {
			break
		}
		p = next
	}
	return out
}

// qcow2Backing is the backing file the qcow2 image at path names, made
// absolute from the image's own directory, and whether the chain goes on
// from it: only where the header says the backing image is qcow2 too. A
// raw image's first bytes are its guest's to write and could read as a
// header naming anything; so could a backing image of no stated format.
// Only a regular file is read, opened so that no open blocks or acts (a
// FIFO, a device).
func qcow2Backing(path string) (backing string, more, ok bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false, false
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", false, false
	}
	var h [qcow2HeaderLen]byte
	n, err := io.ReadFull(f, h[:])
	if n < 20 || binary.BigEndian.Uint32(h[0:4]) != qcow2Magic {
		return "", false, false
	}
	off, size := binary.BigEndian.Uint64(h[8:16]), binary.BigEndian.Uint32(h[16:20])
	if off == 0 || size == 0 || size > maxBackingName {
		return "", false, false
	}
	name := make([]byte, size)
	if _, err := f.ReadAt(name, int64(off)); err != nil {
		return "", false, false
	}
	b := string(name)
	if !filepath.IsAbs(b) {
		b = filepath.Join(filepath.Dir(path), b)
	}
	return filepath.Clean(b), err == nil && backingFormat(f, h[:]) == "qcow2", true
}

// qcow2HeaderLen is what is read of a header: version 3's fixed part.
const qcow2HeaderLen = 104

// qcow2BackingFormat is the header extension naming the backing image's
// format.
const qcow2BackingFormat = 0xE2792ACA

// backingFormat is the backing format a qcow2 header's extensions name,
// "" if none does.
func backingFormat(f *os.File, h []byte) string {
	version := binary.BigEndian.Uint32(h[4:8])
	off := int64(72) // version 2's header ends here
	if version >= 3 {
		off = int64(binary.BigEndian.Uint32(h[100:104]))
	}
	for range 32 {
		var ext [8]byte
		if _, err := f.ReadAt(ext[:], off); err != nil {
			return ""
		}
		kind, length := binary.BigEndian.Uint32(ext[0:4]), binary.BigEndian.Uint32(ext[4:8])
		if kind == 0 || length > 4096 {
			return ""
		}
		if kind == qcow2BackingFormat {
			v := make([]byte, length)
			if _, err := f.ReadAt(v, off+8); err != nil {
				return ""
			}
			return string(v)
		}
		off += 8 + int64((length+7)&^7)
	}
	return ""
}
