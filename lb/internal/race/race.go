//go:build race

// Package race tells whether the race detector is on: its instrumentation
// allocates now and then, so allocation counts mean nothing under it.
package race

// Enabled is set when the race detector is on.
const Enabled = true
