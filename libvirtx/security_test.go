package libvirtx

import (
	"reflect"
	"testing"
)

func TestParseSecurity(t *testing.T) {
	// As libvirt 11.3 on Debian without AppArmor writes it.
	caps := `<capabilities><host><uuid>11111111-1111-4111-8111-111111111111</uuid>
  <secmodel><model>none</model><doi>0</doi></secmodel>
  <secmodel><model>dac</model><doi>0</doi>
    <baselabel type='kvm'>+64055:+64055</baselabel>
    <baselabel type='qemu'>+64055:+64055</baselabel>
  </secmodel></host></capabilities>`
	got, err := ParseSecurity(caps)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Security{Models: []string{"none", "dac"}, UID: 64055, GID: 64055}); !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseSecurity = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"64055", "+a:+1", "+1:+", "+-1:+2"} {
		caps := `<capabilities><host><secmodel><model>dac</model><baselabel type='kvm'>` + bad + `</baselabel></secmodel></host></capabilities>`
		if _, err := ParseSecurity(caps); err == nil {
			t.Errorf("base label %q accepted", bad)
		}
	}
	if _, err := ParseSecurity("<capabilities"); err == nil {
		t.Error("broken XML accepted")
	}
}
