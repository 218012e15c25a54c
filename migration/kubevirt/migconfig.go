package kubevirt

import (
	"encoding/json"
	"math"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ferry-vm/ferry/api"
)

// KubeVirt's built-in migration defaults (pkg/virt-config/virt-config.go,
// v1.9), which it applies to whatever the KubeVirt CR leaves unset.
// Auto-converge and post-copy default to false, the bandwidth to 0
// (unlimited).
const (
	defaultCompletionTimeoutPerGiB = 150
	defaultProgressTimeout         = 150
	defaultMaxDowntimeMs           = 900
	defaultParallelOutboundPerNode = 2
	defaultParallelPerCluster      = 5
)

// migrationConfig is KubeVirt's MigrationConfiguration as far as a plan
// needs it. nil: not set at this layer, the layer below decides.
type migrationConfig struct {
	allowPostCopy, allowAutoConverge, allowWorkloadDisruption *bool
	bandwidth                                                 *resource.Quantity
	completionTimeoutPerGiB, progressTimeout, maxDowntimeMs   *int64
	parallelOutbound, parallelCluster                         *int64
}

func kubevirtDefaults() migrationConfig {
	f := false
	i := func(v int64) *int64 { return &v }
	return migrationConfig{
		allowPostCopy: &f, allowAutoConverge: &f,
		bandwidth:               resource.NewQuantity(0, resource.BinarySI),
		completionTimeoutPerGiB: i(defaultCompletionTimeoutPerGiB),
		progressTimeout:         i(defaultProgressTimeout),
		maxDowntimeMs:           i(defaultMaxDowntimeMs),
		parallelOutbound:        i(defaultParallelOutboundPerNode),
		parallelCluster:         i(defaultParallelPerCluster),
	}
}

// over returns c with every field c leaves unset taken from below, as
// KubeVirt lays a configuration over its defaults (one JSON object
// decoded onto another) or a policy over the cluster's.
func (c migrationConfig) over(below migrationConfig) migrationConfig {
	pick := func(top, low *int64) *int64 {
		if top != nil {
			return top
		}
		return low
	}
	pickB := func(top, low *bool) *bool {
		if top != nil {
			return top
		}
		return low
	}
	out := migrationConfig{
		allowPostCopy:           pickB(c.allowPostCopy, below.allowPostCopy),
		allowAutoConverge:       pickB(c.allowAutoConverge, below.allowAutoConverge),
		allowWorkloadDisruption: pickB(c.allowWorkloadDisruption, below.allowWorkloadDisruption),
		bandwidth:               c.bandwidth,
		completionTimeoutPerGiB: pick(c.completionTimeoutPerGiB, below.completionTimeoutPerGiB),
		progressTimeout:         pick(c.progressTimeout, below.progressTimeout),
		maxDowntimeMs:           pick(c.maxDowntimeMs, below.maxDowntimeMs),
		parallelOutbound:        pick(c.parallelOutbound, below.parallelOutbound),
		parallelCluster:         pick(c.parallelCluster, below.parallelCluster),
	}
	if out.bandwidth == nil {
		out.bandwidth = below.bandwidth
	}
	return out
}

// workloadDisruptionFollowsPostCopy is KubeVirt's backward compatibility
// (virt-config's GetMigrationConfiguration, virt-handler, and a policy
// alike): allowWorkloadDisruption left unset takes allowPostCopy's value.
func (c *migrationConfig) workloadDisruptionFollowsPostCopy() {
	if c.allowWorkloadDisruption == nil && c.allowPostCopy != nil {
		v := *c.allowPostCopy
		c.allowWorkloadDisruption = &v
	}
}

// readMigrationConfig reads a MigrationConfiguration (the KubeVirt CR's,
// a VMI status's, or a MigrationPolicy's spec, which shares its names).
// A value of the wrong type counts as unset: the CRDs' schemas refuse
// those, so only a hand-made object has them. set is false if nothing
// was.
func readMigrationConfig(m map[string]any) (c migrationConfig, set bool) {
	b := func(k string) *bool {
		if v, ok := m[k].(bool); ok {
			set = true
			return &v
		}
		return nil
	}
	i := func(k string) *int64 {
		if v, ok := integer(m[k]); ok {
			set = true
			return &v
		}
		return nil
	}
	c.allowPostCopy, c.allowAutoConverge, c.allowWorkloadDisruption = b("allowPostCopy"), b("allowAutoConverge"), b("allowWorkloadDisruption")
	c.completionTimeoutPerGiB, c.progressTimeout, c.maxDowntimeMs = i("completionTimeoutPerGiB"), i("progressTimeout"), i("maxDowntimeMs")
	c.parallelOutbound, c.parallelCluster = i("parallelOutboundMigrationsPerNode"), i("parallelMigrationsPerCluster")
	if q, ok := quantity(m["bandwidthPerMigration"]); ok {
		c.bandwidth, set = q, true
	}
	return c, set
}

// integer reads a JSON number as the API machinery decodes it (int64 when
// whole, else float64) or as a test writes it.
func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<63 {
			return int64(n), true
		}
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

// quantity reads an int-or-string Quantity. A negative one counts as
// unset: KubeVirt would fail the migration on it rather than apply it.
func quantity(v any) (*resource.Quantity, bool) {
	var q resource.Quantity
	switch x := v.(type) {
	case string:
		p, err := resource.ParseQuantity(x)
		if err != nil {
			return nil, false
		}
		q = p
	case float64:
		p, err := resource.ParseQuantity(strconv.FormatFloat(x, 'f', -1, 64))
		if err != nil {
			return nil, false
		}
		q = p
	default:
		n, ok := integer(v)
		if !ok {
			return nil, false
		}
		q = *resource.NewQuantity(n, resource.BinarySI)
	}
	if q.Sign() < 0 {
		return nil, false
	}
	return &q, true
}

// bandwidthBytes is the cap libvirt gets from KubeVirt's quantity: whole
// MiB/s, rounded to the nearest, at least 1 MiB/s unless 0 (virt-launcher's
// QuantityToByte and QuantityToMebiByte, a fraction rounded down first).
func bandwidthBytes(q *resource.Quantity) uint64 {
	if q == nil {
		return 0
	}
	b, exact := q.AsInt64()
	if !exact {
		b = q.Value() - 1
	}
	const mib = 1 << 20
	switch {
	case b <= 0:
		return 0
	case b < mib:
		return mib
	}
	return uint64(float64(b)/mib+0.5) * mib
}

// EffectiveMigration is the configuration KubeVirt applies to vmi's
// migration, found as KubeVirt finds it. While vmi migrates, KubeVirt's
// own record of what it applies (status.migrationState.
// migrationConfiguration) wins. Otherwise the next migration is resolved
// afresh, as virt-controller does at each migration's hand-off: the
// MigrationPolicy that matches vmi (see matchPolicy) over the KubeVirt
// CR's spec.configuration.migrations over KubeVirt's defaults. A record
// of a finished migration is not used: it describes the policy and
// cluster of its day. kubevirtCR and policies may be nil (KubeVirt's
// defaults; no policy); namespaceLabels are the labels of vmi's
// namespace.
func EffectiveMigration(vmi *unstructured.Unstructured, kubevirtCR *unstructured.Unstructured, policies []*unstructured.Unstructured, namespaceLabels map[string]string) api.KubeVirtMigration {
	cluster, source := kubevirtDefaults(), api.KubeVirtFromDefaults
	if kubevirtCR != nil {
		if m, _, _ := unstructured.NestedMap(kubevirtCR.Object, "spec", "configuration", "migrations"); m != nil {
			c, set := readMigrationConfig(m)
			if set {
				cluster, source = c.over(cluster), api.KubeVirtFromCluster
			}
		}
	}
	cluster.workloadDisruptionFollowsPostCopy()

	eff, policy := cluster, ""
	var labels map[string]string
	if vmi != nil {
		labels = vmi.GetLabels()
	}
	if rec, name, ok := migratingRecord(vmi); ok {
		// virt-handler's own fallbacks for a record an older
		// virt-controller wrote.
		rec.workloadDisruptionFollowsPostCopy()
		if rec.maxDowntimeMs == nil {
			d := int64(defaultMaxDowntimeMs)
			rec.maxDowntimeMs = &d
		}
		eff, policy, source = rec.over(cluster), name, api.KubeVirtFromVMIStatus
		// virt-controller throttles migrations by its current
		// configuration, not by a VMI's record.
		eff.parallelOutbound, eff.parallelCluster = cluster.parallelOutbound, cluster.parallelCluster
	} else if p := matchPolicy(policies, labels, namespaceLabels); p != nil {
		spec, _, _ := unstructured.NestedMap(p.Object, "spec")
		c, _ := readMigrationConfig(spec)
		// A policy overrides these alone (MigrationPolicySpec); its CRD
		// prunes anything else.
		c.progressTimeout, c.parallelOutbound, c.parallelCluster = nil, nil, nil
		c.workloadDisruptionFollowsPostCopy()
		eff, policy, source = c.over(cluster), p.GetName(), api.KubeVirtFromPolicy
	}
	return api.KubeVirtMigration{
		AllowPostCopy:           *eff.allowPostCopy,
		AllowAutoConverge:       *eff.allowAutoConverge,
		AllowWorkloadDisruption: *eff.allowWorkloadDisruption,
		BandwidthBytesPerSecond: bandwidthBytes(eff.bandwidth),
		CompletionTimeoutPerGiB: *eff.completionTimeoutPerGiB,
		ProgressTimeoutSeconds:  *eff.progressTimeout,
		MaxDowntimeMs:           uint64(max(*eff.maxDowntimeMs, 0)),
		ParallelOutboundPerNode: int(*eff.parallelOutbound),
		ParallelPerCluster:      int(*eff.parallelCluster),
		Policy:                  policy,
		Source:                  source,
	}
}

// migratingRecord reads what KubeVirt recorded it applies to the
// migration vmi is in, if vmi is migrating: handed off (the record is
// written then) and neither completed, failed nor ended.
func migratingRecord(vmi *unstructured.Unstructured) (migrationConfig, string, bool) {
	if vmi == nil {
		return migrationConfig{}, "", false
	}
	ms, _, _ := unstructured.NestedMap(vmi.Object, "status", "migrationState")
	cfg, _ := ms["migrationConfiguration"].(map[string]any)
	if cfg == nil {
		return migrationConfig{}, "", false
	}
	if done, _ := ms["completed"].(bool); done {
		return migrationConfig{}, "", false
	}
	if failed, _ := ms["failed"].(bool); failed {
		return migrationConfig{}, "", false
	}
	if end, _ := ms["endTimestamp"].(string); end != "" {
		return migrationConfig{}, "", false
	}
	c, _ := readMigrationConfig(cfg)
	name, _ := ms["migrationPolicyName"].(string)
	return c, name, true
}
