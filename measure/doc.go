// Package measure learns what a domain's migration would face, without
// migrating it: how fast the guest dirties its memory, measured by QEMU's
// own dirty-rate calculation (virDomainStartDirtyRateCalc) on a period,
// a few domains at a time, and never while the domain migrates.
package measure
