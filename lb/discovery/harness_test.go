package discovery

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/rs/zerolog"
)

// bubble runs f in a testing/synctest bubble, where Interval and
// RemoveAfter pass at once with time.Sleep. The zone is started outside
// it: its servers wait on real sockets, which would keep a bubble alive.
// The lookups, made inside, are real UDP exchanges with the zone.
func bubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, f)
}

// recorder collects the changes a Source delivers.
type recorder struct {
	changes []Change
}

func (r *recorder) onChange(c Change) { r.changes = append(r.changes, c) }

// take returns the changes delivered since the last take and forgets them,
// so that the next check sees only what follows.
func (r *recorder) take() []Change {
	c := r.changes
	r.changes = nil
	return c
}

// newSource returns a Source asking z, with cfg's other fields, whose
// changes go to the recorder returned.
func newSource(t *testing.T, z *zone, cfg Config) (*Source, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg.Server = z.addr
	cfg.OnChange = rec.onChange
	cfg.Log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("cannot build source: %s", err)
	}
	return s, rec
}

// refresh runs one refresh and checks the changes it delivered: none when
// want is empty, else exactly want.
func refresh(t *testing.T, s *Source, rec *recorder, want Change) {
	t.Helper()
	s.Refresh(context.Background())
	got := rec.take()
	if want.IsEmpty() {
		if len(got) != 0 {
			t.Fatalf("got changes %+v; want none", got)
		}
		return
	}
	if len(got) != 1 || !equalChange(got[0], want) {
		t.Fatalf("got changes %+v; want one, %+v", got, want)
	}
}

func equalChange(a, b Change) bool {
	return slices.Equal(a.Added, b.Added) && slices.Equal(a.Removed, b.Removed)
}

// workers builds a []Worker of one role from URLs.
func workers(role Role, urls ...string) []Worker {
	ws := make([]Worker, len(urls))
	for i, u := range urls {
		ws[i] = Worker{Role: role, URL: u}
	}
	return ws
}

// checkWorkers checks s's current set.
func checkWorkers(t *testing.T, s *Source, want []Worker) {
	t.Helper()
	if got := s.Workers(); !slices.Equal(got, want) {
		t.Fatalf("got workers %+v; want %+v", got, want)
	}
}
