package libvirtxtest

import (
	"fmt"
	"reflect"

	libvirt "github.com/digitalocean/go-libvirt"
)

// job is one job's statistics as virDomainGetJobStats gives them: the
// job's type and its typed parameters, or the error the call fails with.
type job struct {
	typ    int32
	params []param
	err    *libvirt.Error
}

// operation is the job's virDomainJobOperation, 0 when it names none.
func (j *job) operation() int32 {
	for _, p := range j.params {
		if p.name == libvirt.DomainJobOperationStr {
			switch v := p.value.(type) {
			case int32:
				return v
			case uint32:
				return int32(v)
			case int64:
				return int32(v)
			case uint64:
				return int32(v)
			case int:
				return int32(v)
			}
		}
	}
	return 0
}

type param struct {
	name  string
	value any
}

// jobFields are libvirt's names for job figures, by the names of the
// fields libvirtx.JobStats holds them in. This package cannot import
// libvirtx (libvirtx's own tests import it), so figures come as any struct
// with fields of these names; Type is the job's type, and MemoryDirtyRate
// is in bytes per second, sent in pages as libvirt does.
var jobFields = map[string]string{
	"Operation":              libvirt.DomainJobOperationStr,
	"TimeElapsedMs":          libvirt.DomainJobTimeElapsed,
	"TimeElapsedNetMs":       libvirt.DomainJobTimeElapsedNet,
	"TimeRemainingMs":        libvirt.DomainJobTimeRemaining,
	"DowntimeMs":             libvirt.DomainJobDowntime,
	"DowntimeNetMs":          libvirt.DomainJobDowntimeNet,
	"SetupTimeMs":            libvirt.DomainJobSetupTime,
	"DataTotal":              libvirt.DomainJobDataTotal,
	"DataProcessed":          libvirt.DomainJobDataProcessed,
	"DataRemaining":          libvirt.DomainJobDataRemaining,
	"MemoryTotal":            libvirt.DomainJobMemoryTotal,
	"MemoryProcessed":        libvirt.DomainJobMemoryProcessed,
	"MemoryRemaining":        libvirt.DomainJobMemoryRemaining,
	"MemoryConstant":         libvirt.DomainJobMemoryConstant,
	"MemoryNormal":           libvirt.DomainJobMemoryNormal,
	"MemoryNormalBytes":      libvirt.DomainJobMemoryNormalBytes,
	"MemoryBps":              libvirt.DomainJobMemoryBps,
	"MemoryDirtyRate":        libvirt.DomainJobMemoryDirtyRate,
	"MemoryPageSize":         libvirt.DomainJobMemoryPageSize,
	"MemoryIteration":        libvirt.DomainJobMemoryIteration,
	"MemoryPostCopyReqs":     libvirt.DomainJobMemoryPostcopyReqs,
	"DiskTotal":              libvirt.DomainJobDiskTotal,
	"DiskProcessed":          libvirt.DomainJobDiskProcessed,
	"DiskRemaining":          libvirt.DomainJobDiskRemaining,
	"DiskBps":                libvirt.DomainJobDiskBps,
	"CompressionCache":       libvirt.DomainJobCompressionCache,
	"CompressionBytes":       libvirt.DomainJobCompressionBytes,
	"CompressionPages":       libvirt.DomainJobCompressionPages,
	"CompressionCacheMisses": libvirt.DomainJobCompressionCacheMisses,
	"CompressionOverflow":    libvirt.DomainJobCompressionOverflow,
	"AutoConvergeThrottle":   libvirt.DomainJobAutoConvergeThrottle,
	"Success":                libvirt.DomainJobSuccess,
	"ErrMsg":                 libvirt.DomainJobErrmsg,
}

// defaultPageSize is the page size libvirt's readers assume when none is
// reported: QEMU's target page on x86.
const defaultPageSize = 4096

// newJob reads a figures struct (nil: no job; a libvirt.Error: the call
// fails with it). Zero figures are left out, as a reader takes a missing
// one for zero.
func newJob(stats any) (*job, error) {
	switch s := stats.(type) {
	case nil:
		return nil, nil
	case libvirt.Error:
		return &job{err: &s}, nil
	}
	v := reflect.ValueOf(stats)
	if v.Kind() != reflect.Struct {
		return nil, fmt.Errorf("libvirtxtest: job statistics are a struct of figures, not a %T", stats)
	}
	j := &job{}
	page := uint64(defaultPageSize)
	if f := v.FieldByName("MemoryPageSize"); f.IsValid() && f.Uint() != 0 {
		page = f.Uint()
	}
	for i := range v.NumField() {
		field, f := v.Type().Field(i), v.Field(i)
		if field.Name == "Type" {
			j.typ = int32(f.Int())
			continue
		}
		name, ok := jobFields[field.Name]
		if !ok {
			return nil, fmt.Errorf("libvirtxtest: job figure %s has no libvirt name here (jobFields)", field.Name)
		}
		if f.IsZero() {
			continue
		}
		var value any
		switch f.Kind() {
		case reflect.Uint64:
			value = f.Uint()
		case reflect.Int32:
			value = int32(f.Int())
		case reflect.Bool:
			value = f.Bool()
		case reflect.String:
			value = f.String()
		default:
			return nil, fmt.Errorf("libvirtxtest: job figure %s is a %s", field.Name, f.Type())
		}
		if field.Name == "MemoryDirtyRate" {
			if f.Uint()%page != 0 {
				return nil, fmt.Errorf("libvirtxtest: a dirty rate of %d bytes/s is not whole %d-byte pages, as libvirt reports it", f.Uint(), page)
			}
			value = f.Uint() / page
		}
		j.params = append(j.params, param{name, value})
	}
	return j, nil
}

// encode is the reply to virDomainGetJobStats: the type, then the
// parameters.
func (j *job) encode(x *XDR) {
	x.I32(j.typ).U32(uint32(len(j.params)))
	for _, p := range j.params {
		x.Param(p.name, p.value)
	}
}

// active says whether the job runs (bounded or unbounded).
func (j *job) active() bool {
	return j != nil && j.err == nil && (j.typ == int32(libvirt.DomainJobBounded) || j.typ == int32(libvirt.DomainJobUnbounded))
}
