//go:build !race

package race

// Enabled is set when the race detector is on.
const Enabled = false
