package libvirtx

import (
	"testing"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
)

// BenchmarkCgroupCPURead compares one CPU reading of a cgroup v1 group the
// way it used to be taken (load the group with every controller, read every
// controller's statistics) with the way a kept, CPU-only group reads it.
// It reads the root group, which every host has.
func BenchmarkCgroupCPURead(b *testing.B) {
	if cgroups.Mode() == cgroups.Unified {
		b.Skip("cgroup v1 comparison; this host runs cgroup v2 only")
	}
	allowAny := func(c *cgroup1.InitConfig) error { c.InitCheck = cgroup1.AllowAny; return nil }
	b.Run("load+all-controllers", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cg, err := cgroup1.Load(cgroup1.StaticPath("/"), cgroup1.WithHierarchy(cgroup1.Default), allowAny)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := cg.Stat(cgroup1.IgnoreNotExist); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kept,cpu-only", func(b *testing.B) {
		cg, err := cgroup1.Load(cgroup1.StaticPath("/"), cgroup1.WithHierarchy(cpuSubsystems), allowAny)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			st, err := cg.Stat(cgroup1.IgnoreNotExist)
			if err != nil || st.CPU == nil {
				b.Fatalf("%v %v", st, err)
			}
		}
	})
}
