package policy

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Assignment modes of the manual policy for a key it has not seen
// (--assignment-mode).
const (
	AssignRandom   = "random"
	AssignMinLoad  = "min_load"
	AssignMinGroup = "min_group"
)

// ManualConfig holds the manual policy's parameters, named after
// sglang_router's flags (router_args.py defaults: 4 h, random).
type ManualConfig struct {
	// MaxIdle (--max-idle-secs) is how long a key unused keeps its workers.
	MaxIdle time.Duration
	// Assignment (--assignment-mode) chooses a new key's worker: AssignRandom,
	// AssignMinLoad (fewest in flight, ties at random) or AssignMinGroup
	// (fewest keys, ties at random).
	Assignment string
}

// DefaultManual returns sglang_router's defaults.
func DefaultManual() ManualConfig {
	return ManualConfig{MaxIdle: 4 * time.Hour, Assignment: AssignRandom}
}

// MaxManualKeys bounds the routing keys a Manual remembers at once; a new
// key beyond it is placed as a request without a key is, and remembered
// once Evict has made room.
const MaxManualKeys = 1 << 16

// stickyCandidates is how many workers a key remembers (SMG's
// MAX_CANDIDATE_WORKERS): the one it moved to and the one before, which it
// returns to when that one is usable again.
const stickyCandidates = 2

// Manual is the manual policy of one pool (SMG policies/manual.rs): each
// routing key (X-SMG-Routing-Key) sticks to the worker it was first given;
// it moves only when that worker is not usable, and never when workers
// join. Keys unused for MaxIdle are forgotten by Evict. Workers are known
// by stable names (SetWorkers), so that a key survives the pool being
// renumbered. It is safe for concurrent use.
type Manual struct {
	cfg    ManualConfig
	mu     sync.Mutex
	keys   map[string]*sticky
	index  map[string]int // worker name to pool index
	groups map[string]int // keys whose newest worker it is, by worker name
	names  []string
}

// sticky is a key's workers, oldest first, and when it was last used.
type sticky struct {
	workers []string
	used    time.Time
}

// CheckAssignment refuses an assignment mode that is none of AssignRandom,
// AssignMinLoad and AssignMinGroup.
func CheckAssignment(mode string) error {
	switch mode {
	case AssignRandom, AssignMinLoad, AssignMinGroup:
		return nil
	}
	return fmt.Errorf("unknown assignment mode %q; want %s, %s or %s", mode, AssignRandom, AssignMinLoad, AssignMinGroup)
}

// NewManual returns a policy that knows no key; it refuses an unknown
// assignment mode (CheckAssignment).
func NewManual(cfg ManualConfig) (*Manual, error) {
	if err := CheckAssignment(cfg.Assignment); err != nil {
		return nil, err
	}
	return &Manual{cfg: cfg, keys: map[string]*sticky{}, index: map[string]int{}, groups: map[string]int{}}, nil
}

// SetWorkers names the pool's workers: worker i of later picks is
// names[i], and "" stands for no worker at i (a pool's empty slot). Keys
// keep their workers by name across calls.
func (m *Manual) SetWorkers(names []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.names = append(m.names[:0], names...)
	clear(m.index)
	for w, name := range names {
		if name != "" {
			m.index[name] = w
		}
	}
}

// Pick chooses a worker of p for key at time now. A request without a key
// gets a worker by the assignment mode and is not remembered (SMG's
// no_routing_id branch).
func (m *Manual) Pick(key string, now time.Time, p Pool) Choice {
	m.mu.Lock()
	defer m.mu.Unlock()
	if key == "" {
		return m.assign(p, ReasonNoKey)
	}
	s := m.keys[key]
	if s != nil {
		s.used = now
		for _, name := range s.workers {
			if w, ok := m.index[name]; ok && w < len(p.Loads) && p.usable(w) {
				return Choice{Worker: w, Reason: ReasonStickyHit}
			}
		}
	}
	reason := ReasonStickyMoved
	if s == nil {
		if len(m.keys) >= MaxManualKeys {
			// Keys come from clients: a flood of new ones must not grow
			// the map, nor the lock's hold in Evict, without bound.
			return m.assign(p, ReasonNewKey)
		}
		s = &sticky{used: now}
		m.keys[key] = s
		reason = ReasonNewKey
	}
	ch := m.assign(p, reason)
	if ch.Worker >= 0 && ch.Worker < len(m.names) {
		m.remember(s, m.names[ch.Worker])
	}
	return ch
}

// remember makes name the key's newest worker, dropping its oldest when it
// has stickyCandidates already.
func (m *Manual) remember(s *sticky, name string) {
	if n := len(s.workers); n > 0 {
		m.groups[s.workers[n-1]]--
	}
	if len(s.workers) == stickyCandidates {
		s.workers = append(s.workers[:0], s.workers[1:]...)
	}
	s.workers = append(s.workers, name)
	m.groups[name]++
}

// assign chooses a usable worker by the assignment mode.
func (m *Manual) assign(p Pool, reason Reason) Choice {
	var w int
	switch m.cfg.Assignment {
	case AssignMinLoad:
		w = p.randomMin(func(w int) int { return p.Loads[w] })
	case AssignMinGroup:
		w = p.randomMin(func(w int) int {
			if w < len(m.names) {
				return m.groups[m.names[w]]
			}
			return 0
		})
	default:
		w = p.random()
	}
	if w < 0 {
		return none
	}
	return Choice{Worker: w, Reason: reason}
}

// randomMin returns a usable worker with the smallest value of f, ties
// broken at random, as SMG's select_min_by does; -1 when none is usable.
func (p Pool) randomMin(f func(w int) int) int {
	lowest, ties := 0, 0
	for w := range p.Loads {
		if !p.usable(w) {
			continue
		}
		switch v := f(w); {
		case ties == 0 || v < lowest:
			lowest, ties = v, 1
		case v == lowest:
			ties++
		}
	}
	if ties == 0 {
		return -1
	}
	i := rand.IntN(ties)
	for w := range p.Loads {
		if p.usable(w) && f(w) == lowest {
			if i == 0 {
				return w
			}
			i--
		}
	}
	panic("BUG: policy.Pool.randomMin lost a tie")
}

// Evict forgets the keys unused for MaxIdle at now and returns how many
// are left. The caller runs it on its own ticker (SMG: every
// eviction interval).
func (m *Manual) Evict(now time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, s := range m.keys {
		if now.Sub(s.used) >= m.cfg.MaxIdle {
			if n := len(s.workers); n > 0 {
				m.groups[s.workers[n-1]]--
			}
			delete(m.keys, key)
		}
	}
	return len(m.keys)
}
