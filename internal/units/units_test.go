package units

import "testing"

func TestIEC(t *testing.T) {
	for in, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 384 << 20: "384.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := IEC(in); got != want {
			t.Errorf("IEC(%d) = %q, want %q", in, got, want)
		}
	}
}
