package libvirtx

import (
	"encoding/xml"
	"io"
	"slices"
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
	var names pathNames
	have, err := names.of(canon)
	if err != nil {
		return refuse("its canonical form does not parse: %v", err)
	}
	want, err := names.of(orig)
	if err != nil {
		return refuse("it does not parse: %v", err)
	}
	for _, id := range want.order {
		if !have.set[id] {
			return refuse("%s would be lost: it is not among what this node's libvirt is given (libvirtxml does not model it), so the target would run another configuration", names.String(id))
		}
	}
	return nil
}

// pathNames interns element paths and attributes as (parent, name)
// pairs: a path is kept once and never spelled out, so a document costs
// what its tags do, however deep they nest.
type pathNames struct {
	nodes []pathNode
	index map[pathNode]int
}

// pathNode is an element (name) or an attribute ("@" name) under parent,
// -1 at the root.
type pathNode struct {
	parent int
	name   string
}

// nameSet is a document's paths, in document order without repeats.
type nameSet struct {
	set   map[int]bool
	order []int
}

func (n *pathNames) id(parent int, name string) int {
	k := pathNode{parent, name}
	if id, ok := n.index[k]; ok {
		return id
	}
	if n.index == nil {
		n.index = map[pathNode]int{}
	}
	n.nodes = append(n.nodes, k)
	n.index[k] = len(n.nodes) - 1
	return len(n.nodes) - 1
}

// String spells path id out, as <a/b> or <a/b @c>.
func (n *pathNames) String(id int) string {
	var parts []string
	attr := ""
	if name := n.nodes[id].name; strings.HasPrefix(name, "@") {
		attr, id = " "+name, n.nodes[id].parent
	}
	for ; id >= 0; id = n.nodes[id].parent {
		parts = append(parts, n.nodes[id].name)
	}
	slices.Reverse(parts)
	return "<" + strings.Join(parts, "/") + attr + ">"
}

// of lists each element path and attribute of doc, outside <metadata>.
func (n *pathNames) of(doc string) (nameSet, error) {
	s := nameSet{set: map[int]bool{}}
	add := func(id int) {
		if !s.set[id] {
			s.set[id] = true
			s.order = append(s.order, id)
		}
	}
	dec := xml.NewDecoder(strings.NewReader(doc))
	path := []int{}
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
			if metadata > 0 || (t.Name.Local == "metadata" && len(path) == 1) {
				metadata++
				path = append(path, -1)
				continue
			}
			parent := -1
			if len(path) > 0 {
				parent = path[len(path)-1]
			}
			id := n.id(parent, t.Name.Local)
			path = append(path, id)
			add(id)
			for _, a := range t.Attr {
				if a.Name.Space == "xmlns" || a.Name.Local == "xmlns" {
					continue
				}
				add(n.id(id, "@"+a.Name.Local))
			}
		case xml.EndElement:
			path = path[:len(path)-1]
			if metadata > 0 {
				metadata--
			}
		}
	}
}
