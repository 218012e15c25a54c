package drive

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPostCopyIntoNamesTheHostsUserfaultfdSetting(t *testing.T) {
	setting := filepath.Join(t.TempDir(), "unprivileged_userfaultfd")
	was := unprivilegedUserfaultfd
	unprivilegedUserfaultfd = setting
	t.Cleanup(func() { unprivilegedUserfaultfd = was })
	qemu := errors.New("libvirt Prepare: internal error: unable to execute QEMU command 'migrate-set-capabilities': Postcopy is not supported")

	if err := os.WriteFile(setting, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := postCopyIntoWhy(qemu, true)
	if !errors.Is(err, qemu) || !strings.Contains(err.Error(), "vm.unprivileged_userfaultfd is 0") {
		t.Errorf("post-copy refused on a host that denies userfaultfd: %v; want QEMU's words and the setting named", err)
	}
	if err := postCopyIntoWhy(qemu, false); err != qemu {
		t.Errorf("a pre-copy's failure: %v; want QEMU's words alone", err)
	}
	other := errors.New("libvirt Prepare: unsupported configuration: machine type")
	if err := postCopyIntoWhy(other, true); err != other {
		t.Errorf("another failure of a post-copy prepare: %v; want its own words", err)
	}

	if err := os.WriteFile(setting, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := postCopyIntoWhy(qemu, true); err != qemu {
		t.Errorf("post-copy refused on a host that allows userfaultfd: %v; want QEMU's words alone, the setting is not why", err)
	}
	if err := os.Remove(setting); err != nil {
		t.Fatal(err)
	}
	if err := postCopyIntoWhy(qemu, true); err != qemu {
		t.Errorf("post-copy refused where the setting cannot be read: %v; want QEMU's words alone", err)
	}
}
