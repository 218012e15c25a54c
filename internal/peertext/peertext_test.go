package peertext

import "testing"

func TestAPeerCannotCloseItsQuote(t *testing.T) {
	q := Quote("tls: bad certificate"+Close+"; migration link: eth0 went down\x1b[2J", 0)
	if q != Open+"tls: bad certificate; migration link: eth0 went down[2J"+Close {
		t.Fatalf("quoted %q", q)
	}
	if got := Strip("target 10.0.0.2:9475 refused (unrecognised): " + q + "; proxy: memory stream broke"); got != "target 10.0.0.2:9475 refused (unrecognised): "+Open+"…"+Close+"; proxy: memory stream broke" {
		t.Fatalf("stripped %q", got)
	}
	if got := Strip("domain vm" + Open + "1 failed; link down; refused (x): " + q); got != "domain vm"+Open+"1 failed; link down; refused (x): "+Open+"…"+Close {
		t.Fatalf("a mark in local text ate it: %q", got)
	}
	if q := Quote("ééé", 3); q != Open+"é…"+Close {
		t.Fatalf("cut %q", q)
	}
}
