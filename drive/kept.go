package drive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/internal/atomicfile"
	"github.com/ferry-vm/ferry/libvirtx"
)

// A guest Ferry moves leaves no definition behind, except where its
// target did not say it keeps one: the source's definition stays, shut
// off, for the guest that now runs transient on the target. When that
// guest comes back from that node, the definition left for it is its
// own, and the target adopts it (see refuseDefinedHere); from any other
// node, or for any other definition, an adoption is refused. The source
// notes each definition it keeps so, by UUID, in its state dir.

// keptDir holds a note per definition kept, named by the guest's UUID.
const keptDir = "kept-definitions"

var uuidName = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// keptDefinition is why a shut-off definition of a guest stays here.
type keptDefinition struct {
	UUID   string `json:"uuid"`
	Domain string `json:"domain"`
	// Definition is the SHA-256 of the definition kept (its inactive
	// XML): one started, changed or defined anew since is no longer the
	// one kept for the guest.
	Definition string `json:"definition"`
	// LeftFor is the node the guest left for, which alone may bring it
	// back onto this definition.
	LeftFor string    `json:"leftFor"`
	Kept    time.Time `json:"kept"`
}

func keptPath(stateDir, uuid string) (string, bool) {
	if stateDir == "" || !uuidName.MatchString(uuid) {
		return "", false
	}
	return filepath.Join(stateDir, keptDir, uuid+".json"), true
}

// noteKept records that the definition of rec's guest, of hash
// definition, stays here for it.
func noteKept(stateDir string, rec drivenRecord, definition string) error {
	path, ok := keptPath(stateDir, rec.UUID)
	if !ok || rec.TargetNode == "" {
		return nil
	}
	b, err := json.Marshal(keptDefinition{UUID: rec.UUID, Domain: rec.Domain, Definition: definition, LeftFor: rec.TargetNode, Kept: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, b)
}

// keptFor says whether the definition of uuid here, of hash definition,
// is the one kept for the guest that left for node.
func keptFor(stateDir, uuid, node, definition string) bool {
	path, ok := keptPath(stateDir, uuid)
	if !ok || node == "" {
		return false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var k keptDefinition
	return json.Unmarshal(b, &k) == nil && k.UUID == uuid && k.LeftFor == node && k.Definition != "" && k.Definition == definition
}

// definitionHash is what names a domain's definition as it is now.
func definitionHash(ctx context.Context, c *libvirtx.Conn, dom libvirt.Domain) (string, error) {
	x, err := c.ConfigXML(ctx, dom)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(x))
	return hex.EncodeToString(sum[:]), nil
}

// forgetKept drops the note once the guest is back on its definition.
func forgetKept(stateDir, uuid string) {
	if path, ok := keptPath(stateDir, uuid); ok {
		os.Remove(path)
	}
}
