//go:build race

package lb

// raceEnabled is set when the tests run under the race detector, whose
// instrumentation allocates now and then: allocation counts mean nothing
// there.
const raceEnabled = true
