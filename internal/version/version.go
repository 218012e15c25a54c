// Package version holds the build version, set with -ldflags -X.
package version

// Version is overridden at build time by the Makefile.
var Version = "dev"
