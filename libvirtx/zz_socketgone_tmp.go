package libvirtx

import "errors"

// ErrSocketGone: placeholder until the pool change lands.
var ErrSocketGone = errors.New("libvirt socket removed")
