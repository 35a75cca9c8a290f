package discovery

import (
	"slices"
	"time"
)

// Worker is one worker a Source found. It is a value: compare it with ==.
type Worker struct {
	// Role is the pool it joins.
	Role Role
	// URL is "SCHEME://HOST:PORT", HOST an address (IPv6 bracketed), never
	// a name, so that every replica names the worker alike. With Role it
	// identifies the worker.
	URL string
	// BootstrapPort is a prefill's bootstrap port from its name's
	// _bootstrap._tcp SRV records; 0 when they give none (and always for
	// other roles).
	BootstrapPort int
}

// Change is a difference between two successive sets of workers. A worker
// whose bootstrap port changed is in both lists: removed with the old
// port, added with the new. The caller applies Removed before Added.
type Change struct {
	// Removed are the workers gone, sorted by role then URL.
	Removed []Worker
	// Added are the workers new, sorted by role then URL.
	Added []Worker
}

// IsEmpty tells whether c changes nothing.
func (c Change) IsEmpty() bool {
	return len(c.Removed) == 0 && len(c.Added) == 0
}

// key identifies a worker across refreshes.
type key struct {
	role Role
	url  string
}

// seenWorker is a worker of the current set, and when an answer last had it.
type seenWorker struct {
	w    Worker
	last time.Time
}

// workerSet is the current set of workers and when each was last seen.
// Not safe for concurrent use: Source.Refresh holds its round.
type workerSet struct {
	byKey map[key]seenWorker
}

// update records that the workers seen were in the answers at now, and
// drops those not seen since removeAfter before now. It returns the
// difference from the set before. A worker seen twice (two names of a role
// giving one address) is taken as first seen, so that replicas given the
// names in one order agree.
func (ws *workerSet) update(seen []Worker, now time.Time, removeAfter time.Duration) Change {
	var c Change
	taken := make(map[key]bool, len(seen))
	for _, w := range seen {
		k := key{w.Role, w.URL}
		if taken[k] {
			continue
		}
		taken[k] = true
		old, ok := ws.byKey[k]
		switch {
		case !ok:
			c.Added = append(c.Added, w)
		case old.w != w:
			c.Removed = append(c.Removed, old.w)
			c.Added = append(c.Added, w)
		}
		ws.byKey[k] = seenWorker{w: w, last: now}
	}
	for k, sw := range ws.byKey {
		if now.Sub(sw.last) >= removeAfter {
			c.Removed = append(c.Removed, sw.w)
			delete(ws.byKey, k)
		}
	}
	slices.SortFunc(c.Removed, compareWorkers)
	slices.SortFunc(c.Added, compareWorkers)
	return c
}

// workers returns the set, sorted by role then URL.
func (ws *workerSet) workers() []Worker {
	out := make([]Worker, 0, len(ws.byKey))
	for _, sw := range ws.byKey {
		out = append(out, sw.w)
	}
	slices.SortFunc(out, compareWorkers)
	return out
}
