package discovery

import (
	"fmt"
	"slices"
	"testing"
)

// A and AAAA records give a worker per address, on the port given with
// the name or else the default; IPv6 addresses are bracketed.
func TestAddressRecords(t *testing.T) {
	z := newZone(t)
	z.set(t, "p.pdlb.test", "A 10.0.0.1", "AAAA fd00::1")
	z.set(t, "d.pdlb.test", "A 10.0.1.1", "A 10.0.1.2")
	z.set(t, "f.pdlb.test.", "AAAA ::ffff:10.0.2.1")
	bubble(t, func(t *testing.T) {
		s, rec := newSource(t, z, Config{
			Prefill:  []string{"p.pdlb.test:30000"},
			Decode:   []string{"d.pdlb.test"},
			Fallback: []string{"f.pdlb.test."},
			Port:     8000,
		})
		want := append(append(
			workers(Prefill, "http://10.0.0.1:30000", "http://[fd00::1]:30000"),
			workers(Decode, "http://10.0.1.1:8000", "http://10.0.1.2:8000")...),
			workers(Fallback, "http://10.0.2.1:8000")...)
		refresh(t, s, rec, Change{Added: want})
		checkWorkers(t, s, want)
		refresh(t, s, rec, Change{})
	})
}

// _http._tcp SRV records name each worker's port, and, for prefills only,
// _bootstrap._tcp ones its bootstrap port; the port given with the name
// is then not used.
func TestSRVRecords(t *testing.T) {
	z := newZone(t)
	for _, role := range []string{"p", "d"} {
		z.set(t, role+".pdlb.test", "A 10.9.9.9") // the Service's own address, not a worker
		z.set(t, "_http._tcp."+role+".pdlb.test",
			"SRV 0 10 31000 "+role+"0.pdlb.test.", "SRV 0 90 31001 "+role+"1.pdlb.test.", "SRV 1 0 31002 .")
		z.set(t, "_bootstrap._tcp."+role+".pdlb.test", "SRV 0 0 8998 "+role+"0.pdlb.test.", "SRV 0 0 8999 "+role+"1.pdlb.test.")
	}
	z.set(t, "p0.pdlb.test", "A 10.0.0.1")
	z.set(t, "p1.pdlb.test", "A 10.0.0.2", "AAAA fd00::2")
	z.set(t, "d0.pdlb.test", "A 10.0.1.1")
	z.set(t, "d1.pdlb.test", "A 10.0.1.2")
	bubble(t, func(t *testing.T) {
		s, rec := newSource(t, z, Config{Prefill: []string{"p.pdlb.test:30000"}, Decode: []string{"d.pdlb.test"}})
		want := []Worker{
			{Role: Prefill, URL: "http://10.0.0.1:31000", BootstrapPort: 8998},
			{Role: Prefill, URL: "http://10.0.0.2:31001", BootstrapPort: 8999},
			{Role: Prefill, URL: "http://[fd00::2]:31001", BootstrapPort: 8999},
			{Role: Decode, URL: "http://10.0.1.1:31000"},
			{Role: Decode, URL: "http://10.0.1.2:31001"},
		}
		refresh(t, s, rec, Change{Added: want})

		// A new bootstrap port is the worker removed and added again.
		z.set(t, "_bootstrap._tcp.p.pdlb.test", "SRV 0 0 8998 p0.pdlb.test.", "SRV 0 0 9000 p1.pdlb.test.")
		refresh(t, s, rec, Change{
			Removed: want[1:3],
			Added: []Worker{
				{Role: Prefill, URL: "http://10.0.0.2:31001", BootstrapPort: 9000},
				{Role: Prefill, URL: "http://[fd00::2]:31001", BootstrapPort: 9000},
			},
		})

		// Without _bootstrap._tcp records, a prefill's port is unknown (0).
		z.set(t, "_bootstrap._tcp.p.pdlb.test")
		refresh(t, s, rec, Change{
			Removed: []Worker{
				{Role: Prefill, URL: "http://10.0.0.1:31000", BootstrapPort: 8998},
				{Role: Prefill, URL: "http://10.0.0.2:31001", BootstrapPort: 9000},
				{Role: Prefill, URL: "http://[fd00::2]:31001", BootstrapPort: 9000},
			},
			Added: workers(Prefill, "http://10.0.0.1:31000", "http://10.0.0.2:31001", "http://[fd00::2]:31001"),
		})
	})
}

// A name with A records but no SRV record of its own (NOERROR, no answer,
// rather than NXDOMAIN) is read through its addresses.
func TestNoSRVRecordOfTheName(t *testing.T) {
	z := newZone(t)
	z.set(t, "p.pdlb.test", "A 10.0.0.1")
	z.set(t, "_http._tcp.p.pdlb.test", "TXT \"not an SRV\"")
	z.set(t, "_bootstrap._tcp.p.pdlb.test", "TXT \"not an SRV\"")
	bubble(t, func(t *testing.T) {
		s, rec := newSource(t, z, Config{Prefill: []string{"p.pdlb.test"}})
		refresh(t, s, rec, Change{Added: workers(Prefill, "http://10.0.0.1:80")})
	})
}

// Two names of a role that give one address give one worker, as the first
// name has it, and no change at the next refresh though the second name
// has no bootstrap port for it.
func TestOneAddressTwoNames(t *testing.T) {
	z := newZone(t)
	z.set(t, "p.pdlb.test", "A 10.0.0.1")
	z.set(t, "_bootstrap._tcp.p.pdlb.test", "SRV 0 0 8998 p.pdlb.test.")
	z.set(t, "q.pdlb.test", "A 10.0.0.1")
	bubble(t, func(t *testing.T) {
		s, rec := newSource(t, z, Config{Prefill: []string{"p.pdlb.test:30000", "q.pdlb.test:30000"}})
		want := []Worker{{Role: Prefill, URL: "http://10.0.0.1:30000", BootstrapPort: 8998}}
		refresh(t, s, rec, Change{Added: want})
		refresh(t, s, rec, Change{})
		checkWorkers(t, s, want)
	})
}

// An answer too large for UDP comes truncated, and Go's resolver asks
// again over TCP: every address is a worker.
func TestLargeAnswerOverTCP(t *testing.T) {
	z := newZone(t)
	var rrs, urls []string
	for i := range 200 {
		ip := fmt.Sprintf("10.0.%d.%d", i/100, i%100+1)
		rrs = append(rrs, "A "+ip)
		urls = append(urls, "http://"+ip+":30000")
	}
	z.set(t, "d.pdlb.test", rrs...)
	bubble(t, func(t *testing.T) {
		s, rec := newSource(t, z, Config{Decode: []string{"d.pdlb.test:30000"}})
		want := workers(Decode, urls...)
		slices.SortFunc(want, compareWorkers)
		refresh(t, s, rec, Change{Added: want})
	})
}
