// Package plan predicts how the migration of a domain will go before it
// starts, and orders a node's domains into an evacuation plan.
//
// The prediction reads pre-copy the way the convergence policy reads a
// migration under way (migration.PassesToFit): the first pass sends what
// the guest holds in RAM, each later pass what the guest dirtied during
// the one before, until what is left fits the allowed downtime at the
// path's bandwidth.
package plan
