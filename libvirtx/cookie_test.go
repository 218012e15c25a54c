package libvirtx

import (
	"bytes"
	"strings"
	"testing"
)

// A source's Perform cookie as libvirt writes it with PERSIST_DEST: the
// persistent definition is a <domain> child of the root.
const performCookie = `<qemu-migration>
  <name>g1</name>
  <uuid>0b7f3bd5-4f4d-4c53-9a43-6a0b6b7c2a11</uuid>
  <hostname>a</hostname>
  <hostuuid>11111111-2222-3333-4444-555555555555</hostuuid>
  <feature name='persistent'/>
  <domain type='qemu'>
    <name>g1</name>
    <uuid>0b7f3bd5-4f4d-4c53-9a43-6a0b6b7c2a11</uuid>
    <memory unit='KiB'>262144</memory>
  </domain>
  <statistics><started>1</started></statistics>
</qemu-migration>
`

const checkedDef = `<domain type="qemu"><name>g1</name><uuid>0b7f3bd5-4f4d-4c53-9a43-6a0b6b7c2a11</uuid><memory unit="KiB">131072</memory></domain>`

func TestTheCookieCarriesTheCheckedDefinitionOnly(t *testing.T) {
	out, err := WithPersistentDefinition(append([]byte(performCookie), 0), checkedDef)
	if err != nil {
		t.Fatal(err)
	}
	if out[len(out)-1] != 0 || bytes.Count(out, []byte{0}) != 1 {
		t.Fatalf("not one NUL at the end: %q", out)
	}
	s := string(out[:len(out)-1])
	if strings.Count(s, "<domain") != 1 || !strings.Contains(s, checkedDef) || strings.Contains(s, "262144") {
		t.Fatalf("want the checked definition in place of the source's:\n%s", s)
	}
	for _, kept := range []string{"<hostname>a</hostname>", "<feature name='persistent'/>", "<statistics><started>1</started></statistics>"} {
		if !strings.Contains(s, kept) {
			t.Errorf("%s lost:\n%s", kept, s)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(s), "</qemu-migration>") {
		t.Errorf("the definition is not inside the root:\n%s", s)
	}
}

// A source that sent no definition (it asked no PERSIST_DEST), or several,
// or one hidden in a self-closing tag: the result has exactly the checked one.
func TestEveryDomainOfTheSourceGoes(t *testing.T) {
	for name, cookie := range map[string]string{
		"none":         "<qemu-migration><name>g1</name></qemu-migration>\n",
		"two":          "<qemu-migration><domain>x</domain><name>g1</name><domain type='kvm'><devices/></domain></qemu-migration>",
		"self-closing": "<qemu-migration><domain/><name>g1</name></qemu-migration>",
		"prefixed":     "<qemu-migration xmlns:q='urn:x'><q:domain>x</q:domain></qemu-migration>",
	} {
		out, err := WithPersistentDefinition(append([]byte(cookie), 0), checkedDef)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if n := strings.Count(string(out), "domain"); n != 2 || !strings.Contains(string(out), checkedDef) {
			t.Errorf("%s: want only the checked definition, got %s", name, out)
		}
	}
}

// What libvirt's parser could read otherwise is refused, never passed on.
func TestACookieLibvirtMightReadOtherwiseIsRefused(t *testing.T) {
	for name, cookie := range map[string][]byte{
		"no NUL":          []byte("<qemu-migration/>"),
		"doctype":         []byte("<!DOCTYPE qemu-migration [<!ENTITY d '<domain/>'>]><qemu-migration>&d;</qemu-migration>\x00"),
		"other root":      []byte("<domain><name>g1</name></domain>\x00"),
		"two roots":       []byte("<qemu-migration/><qemu-migration/>\x00"),
		"unclosed":        []byte("<qemu-migration><name>g1</name>\x00"),
		"mismatched":      []byte("<qemu-migration><name>g1</nome></qemu-migration>\x00"),
		"text outside":    []byte("<qemu-migration/>trailing\x00"),
		"empty":           {0},
		"namespaced root": []byte("<m:qemu-migration xmlns:m='urn:x'/>\x00"),
	} {
		if out, err := WithPersistentDefinition(cookie, checkedDef); err == nil {
			t.Errorf("%s: taken as %q", name, out)
		}
	}
}
