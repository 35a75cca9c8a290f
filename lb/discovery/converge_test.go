package discovery

import (
	"slices"
	"testing"
	"time"
)

// Two sources given the same names and the same answers hold the same
// workers after every refresh, whatever order the SRV records come in
// (Go's resolver shuffles them by weight) and whatever refresh each
// started at: replicas converge within one refresh of a DNS change.
func TestReplicasConverge(t *testing.T) {
	z := newZone(t)
	z.set(t, "_http._tcp.p.pdlb.test",
		"SRV 0 50 30000 p0.pdlb.test.", "SRV 0 50 30001 p1.pdlb.test.", "SRV 1 10 30002 p2.pdlb.test.")
	z.set(t, "_bootstrap._tcp.p.pdlb.test", "SRV 0 50 8998 p0.pdlb.test.", "SRV 0 50 8998 p1.pdlb.test.", "SRV 0 50 8998 p2.pdlb.test.")
	z.set(t, "p0.pdlb.test", "A 10.0.0.1")
	z.set(t, "p1.pdlb.test", "A 10.0.0.2", "AAAA fd00::2")
	z.set(t, "p2.pdlb.test", "A 10.0.0.3")
	z.set(t, "d.pdlb.test", "AAAA fd00:1::1", "A 10.0.1.1", "A 10.0.1.2")
	bubble(t, func(t *testing.T) {
		cfg := Config{
			Prefill:     []string{"p.pdlb.test"},
			Decode:      []string{"d.pdlb.test:30000", "d.pdlb.test:30000"},
			RemoveAfter: 10 * time.Second,
		}
		a, recA := newSource(t, z, cfg)
		b, recB := newSource(t, z, cfg)
		both := func() {
			t.Helper()
			for _, s := range []*Source{a, b} {
				s.Refresh(t.Context())
			}
			if wa, wb := a.Workers(), b.Workers(); !slices.Equal(wa, wb) {
				t.Fatalf("got replicas holding %+v and %+v; want the same", wa, wb)
			}
		}
		a.Refresh(t.Context()) // a starts a refresh ahead
		for range 5 {
			both()
		}
		if got := len(a.Workers()); got != 7 {
			t.Fatalf("got %d workers; want 4 prefills and 3 decodes: %+v", got, a.Workers())
		}

		z.set(t, "_http._tcp.p.pdlb.test", "SRV 0 50 30000 p0.pdlb.test.", "SRV 0 50 30001 p1.pdlb.test.")
		z.set(t, "d.pdlb.test", "A 10.0.1.2", "A 10.0.1.3")
		both()
		time.Sleep(10 * time.Second)
		both()
		want := []Worker{
			{Role: Prefill, URL: "http://10.0.0.1:30000", BootstrapPort: 8998},
			{Role: Prefill, URL: "http://10.0.0.2:30001", BootstrapPort: 8998},
			{Role: Prefill, URL: "http://[fd00::2]:30001", BootstrapPort: 8998},
		}
		want = append(want, workers(Decode, "http://10.0.1.2:30000", "http://10.0.1.3:30000")...)
		checkWorkers(t, a, want)
		recA.take()
		recB.take()
	})
}
