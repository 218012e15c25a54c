package libvirtx

import (
	"encoding/xml"
	"io"
	"strings"
)

// lostInRemarshal refuses a domain XML that libvirtxml does not carry
// whole: libvirt gets the checked domain marshalled again, never the
// peer's bytes, and an element or attribute libvirtxml does not model
// would be dropped without a word, so the target QEMU would be built from
// another configuration than the source's. Values may be written another
// way (units, defaults); names must all survive. <metadata> is free-form
// and kept as it is.
func lostInRemarshal(orig, canon string) error {
	have, err := xmlNames(canon)
	if err != nil {
		return refuse("its canonical form does not parse: %v", err)
	}
	want, err := xmlNames(orig)
	if err != nil {
		return refuse("it does not parse: %v", err)
	}
	for _, n := range want.order {
		if !have.set[n] {
			return refuse("%s would be lost: it is not among what this node's libvirt is given (libvirtxml does not model it), so the target would run another configuration", n)
		}
	}
	return nil
}

type nameSet struct {
	set   map[string]bool
	order []string
}

// xmlNames lists each element path and attribute of a document, outside
// <metadata>, as <a/b> and <a/b @c>.
func xmlNames(doc string) (nameSet, error) {
	s := nameSet{set: map[string]bool{}}
	add := func(n string) {
		if !s.set[n] {
			s.set[n] = true
			s.order = append(s.order, n)
		}
	}
	dec := xml.NewDecoder(strings.NewReader(doc))
	var path []string
	metadata := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return s, nil
		}
		if err != nil {
			return s, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			path = append(path, t.Name.Local)
			if metadata > 0 || (t.Name.Local == "metadata" && len(path) == 2) {
				metadata++
				continue
			}
			p := strings.Join(path, "/")
			add("<" + p + ">")
			for _, a := range t.Attr {
				if a.Name.Space == "xmlns" || a.Name.Local == "xmlns" {
					continue
				}
				add("<" + p + " @" + a.Name.Local + ">")
			}
		case xml.EndElement:
			path = path[:len(path)-1]
			if metadata > 0 {
				metadata--
			}
		}
	}
}
