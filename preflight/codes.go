package preflight

import (
	"fmt"

	"github.com/ferry-vm/ferry/api"
)

// The codes are a contract: scripts and alerts key on them, so a code is
// never renamed or given another meaning. doc.go explains each.
const (
	CodePCIPassthrough         = "pci_passthrough"
	CodePCIFailover            = "pci_failover"
	CodeMdev                   = "mdev"
	CodeHostDevice             = "host_device"
	CodeLaunchSecurity         = "launch_security"
	CodeVirtiofs               = "virtiofs"
	CodeHostFilesystem         = "host_filesystem"
	CodeSharedMemory           = "shared_memory"
	CodeSharedMemoryMaster     = "shared_memory_master"
	CodePersistentReservations = "persistent_reservations"
	CodeVhostUser              = "vhost_user"
	CodeVhostVDPA              = "vhost_vdpa"
	CodeTPMPassthrough         = "tpm_passthrough"
	CodeTPMPersistent          = "tpm_persistent"
	CodeTPMExternal            = "tpm_external"
	CodeTransientDisk          = "transient_disk"
	CodeBlockJob               = "block_job"
	CodeCPUInvTSC              = "cpu_invtsc"
	CodeCPUHost                = "cpu_host"
	CodeVsock                  = "vsock"
	CodeLocalDisk              = "local_disk"
	CodeFerryTargetRefuses     = "ferry_target_refuses"
)

// severities gives each code its one severity, so a code means the same
// to whoever reads it wherever it was found.
var severities = map[string]api.Severity{
	CodePCIPassthrough:         api.SeverityBlocks,
	CodePCIFailover:            api.SeverityWarns,
	CodeMdev:                   api.SeverityBlocks,
	CodeHostDevice:             api.SeverityBlocks,
	CodeLaunchSecurity:         api.SeverityBlocks,
	CodeVirtiofs:               api.SeverityBlocks,
	CodeHostFilesystem:         api.SeverityBlocks,
	CodeSharedMemory:           api.SeverityBlocks,
	CodeSharedMemoryMaster:     api.SeverityWarns,
	CodePersistentReservations: api.SeverityBlocks,
	CodeVhostUser:              api.SeverityBlocks,
	CodeVhostVDPA:              api.SeverityBlocks,
	CodeTPMPassthrough:         api.SeverityBlocks,
	CodeTPMPersistent:          api.SeverityWarns,
	CodeTPMExternal:            api.SeverityWarns,
	CodeTransientDisk:          api.SeverityBlocks,
	CodeBlockJob:               api.SeverityBlocks,
	CodeCPUInvTSC:              api.SeverityBlocks,
	CodeCPUHost:                api.SeverityWarns,
	CodeVsock:                  api.SeverityWarns,
	CodeLocalDisk:              api.SeverityWarns,
	CodeFerryTargetRefuses:     api.SeverityWarns,
}

// Severity is the severity every Blocker of code has; "" for a code this
// package does not know.
func Severity(code string) api.Severity { return severities[code] }

func blocker(code, device, path, format string, args ...any) api.Blocker {
	return api.Blocker{
		Code:     code,
		Severity: severities[code],
		Message:  fmt.Sprintf(format, args...),
		Device:   device,
		Path:     path,
	}
}

// FerryTargetRefuses is the warning that no Ferry target takes what names
// (see package libvirtx's RefusedFeatures).
func FerryTargetRefuses(what string) api.Blocker {
	return blocker(CodeFerryTargetRefuses, "", "", "a Ferry target refuses this guest: %s", what)
}
