//go:build !race

package libvirtx

const raceEnabled = false
