// Package migration tracks live migration jobs on one node: one job per
// migrating domain, fed by libvirt events and sampled job statistics, with
// the evidence (samples, iterations, events) that explains how it went.
package migration
