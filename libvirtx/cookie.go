package libvirtx

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
)

// WithPersistentDefinition returns the source's Perform cookie carrying def
// as the guest's persistent definition, in place of whatever the source put
// there. libvirt's Finish with PERSIST_DEST saves the cookie's definition
// (the one <domain> child of <qemu-migration>) before it starts the guest's
// vCPUs, and fails if it cannot: the definition moves inside the protocol,
// as it does between two libvirts. The source's bytes are a peer's, so the
// target gives libvirt its own checked definition instead of them.
//
// A libvirt cookie is a NUL-terminated string; so is the result. A cookie
// libvirt's parser might read otherwise than this one (a DOCTYPE, which
// could declare entities, or any root but <qemu-migration>) is refused.
func WithPersistentDefinition(cookie []byte, def string) ([]byte, error) {
	body, ok := bytes.CutSuffix(cookie, []byte{0})
	if !ok {
		return nil, errors.New("migration cookie: not NUL-terminated, as libvirt's always are")
	}
	cuts, end, err := rootDomainChildren(body)
	if err != nil {
		return nil, fmt.Errorf("migration cookie: %w", err)
	}
	var out bytes.Buffer
	out.Grow(len(body) + len(def) + 1)
	last := 0
	for _, c := range cuts {
		out.Write(body[last:c[0]])
		last = c[1]
	}
	out.Write(body[last:end])
	out.WriteString(def)
	out.WriteString("\n")
	out.Write(body[end:])
	out.WriteByte(0)
	return out.Bytes(), nil
}

// rootDomainChildren finds the byte ranges of every <domain> child of the
// cookie's <qemu-migration> root, and where the root's end tag starts.
func rootDomainChildren(body []byte) (cuts [][2]int, end int, err error) {
	d := xml.NewDecoder(bytes.NewReader(body))
	depth, start := 0, 0
	rootSeen, rootEnded := false, false
	for {
		before := int(d.InputOffset())
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		switch t := tok.(type) {
		case xml.Directive:
			return nil, 0, errors.New("a DOCTYPE or other directive, which libvirt's cookies never hold")
		case xml.StartElement:
			if depth == 0 {
				if rootSeen || t.Name.Local != "qemu-migration" || t.Name.Space != "" {
					return nil, 0, fmt.Errorf("root element <%s>, not one <qemu-migration>", t.Name.Local)
				}
				rootSeen = true
			}
			if depth == 1 && t.Name.Local == "domain" {
				start = before
			}
			depth++
		case xml.EndElement:
			depth--
			switch {
			case depth == 0:
				end, rootEnded = before, true
			case depth == 1 && t.Name.Local == "domain":
				cuts = append(cuts, [2]int{start, int(d.InputOffset())})
			}
		case xml.CharData:
			if depth == 0 && len(bytes.TrimSpace(t)) > 0 {
				return nil, 0, errors.New("text outside its root element")
			}
		}
	}
	if !rootEnded {
		return nil, 0, errors.New("no complete <qemu-migration> element")
	}
	return cuts, end, nil
}
