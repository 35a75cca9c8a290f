//go:build !race

package lb

const raceEnabled = false
