//go:build race

package libvirtx

const raceEnabled = true
