package policy

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"hash/crc64"
	"slices"
	"strconv"
)

// VirtualNodes is how many points each worker gets on a Ring, SMG's count
// (worker/hash_ring.rs, VIRTUAL_NODES_PER_WORKER).
const VirtualNodes = 150

// Ring is a consistent-hash ring of one pool's workers, for prefix_hash and
// consistent_hashing. A worker is placed by a stable name the caller gives
// (its URL), never by its index, so two pdlb processes with the same
// workers build the same ring in any order, and a worker that joins moves
// only about 1/n of the keys. A Ring is immutable: the caller builds a new
// one when the pool changes, and may share it between goroutines.
type Ring struct {
	points []point
	// n is how many workers the ring holds; span is len(names), the
	// bound of their indexes.
	n, span int
}

// point is one virtual node: a position and the worker it stands for, as
// an index into the names the ring was built from.
type point struct {
	pos    uint64
	worker int32
	name   string
}

// NewRing places workers named names (worker i is names[i]) on a ring,
// VirtualNodes points each. Names must be distinct, but for "", which
// stands for no worker at that index (a pool's empty slot) and places no
// points: the ring of a pool with holes is the ring of its workers alone.
func NewRing(names []string) *Ring {
	r := &Ring{points: make([]point, 0, len(names)*VirtualNodes), n: len(names), span: len(names)}
	var buf []byte
	for w, name := range names {
		if name == "" {
			r.n--
			continue
		}
		for v := range VirtualNodes {
			buf = strconv.AppendInt(append(append(buf[:0], name...), '#'), int64(v), 10)
			sum := sha256.Sum256(buf)
			r.points = append(r.points, point{binary.LittleEndian.Uint64(sum[:]), int32(w), name})
		}
	}
	// Equal positions are ordered by name, so that the order names came in
	// never matters.
	slices.SortFunc(r.points, func(a, b point) int {
		return cmp.Or(cmp.Compare(a.pos, b.pos), cmp.Compare(a.name, b.name))
	})
	return r
}

// Len returns how many workers the ring holds.
func (r *Ring) Len() int { return r.n }

// crcTable is the ECMA polynomial's table; it is computed once and only
// read.
var crcTable = crc64.MakeTable(crc64.ECMA)

// Hash returns a key's position on a ring. It is the same in every process
// and on every platform (CRC-64 ECMA, then a splitmix64 finaliser so that
// nearby keys land far apart).
func Hash(key []byte) uint64 {
	h := crc64.Checksum(key, crcTable)
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// walk calls visit on each worker in ring order from position h, each
// worker once, until visit returns true or every worker has been seen.
func (r *Ring) walk(h uint64, visit func(w int) bool) {
	if r.n == 0 {
		return
	}
	var small [4]uint64 // a bit per worker, on the stack for pools up to 256
	seen := small[:]
	if r.span > 256 {
		seen = make([]uint64, (r.span+63)/64)
	}
	start, _ := slices.BinarySearchFunc(r.points, h, func(p point, h uint64) int { return cmp.Compare(p.pos, h) })
	left := r.n
	for i := range r.points {
		w := int(r.points[(start+i)%len(r.points)].worker)
		if seen[w/64]&(1<<(w%64)) != 0 {
			continue
		}
		seen[w/64] |= 1 << (w % 64)
		if visit(w) {
			return
		}
		if left--; left == 0 {
			return
		}
	}
}

// owner returns the first usable worker clockwise from h, or -1.
func (r *Ring) owner(h uint64, p Pool) int {
	found := -1
	r.walk(h, func(w int) bool {
		if w < len(p.Loads) && p.usable(w) {
			found = w
			return true
		}
		return false
	})
	return found
}
