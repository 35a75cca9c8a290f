package fake

import (
	"bytes"

	"github.com/valyala/fastjson"
)

// The fakes read JSON the way SGLang does. Python's json.loads, behind
// FastAPI's request.json(), aiohttp's and requests' .json(), builds a dict
// in which the last of duplicate keys wins: {"stream": false, "stream": true}
// is a stream. fastjson keeps every member and its Get returns the first, so
// every body the fakes read goes through loadJSON, which drops the earlier
// duplicates of each object, nested ones included, before any field is read.
// Keys compare once unescaped, as Python's do ("stre\u0061m" is "stream").

// LoadJSON parses b as a worker's json.loads reads it, as loadJSON does,
// with a parser of its own: for tests and tools that check what a worker
// would make of a body (what pdlb sends, above all). The value is the
// caller's. Servers use loadJSON and pooled parsers instead.
func LoadJSON(b []byte) (*fastjson.Value, error) {
	var p fastjson.Parser
	return loadJSON(&p, b)
}

// loadJSON parses b with p as json.loads reads it: only the last of
// duplicate keys stays in every object. The value is valid until p is
// reused or put back.
func loadJSON(p *fastjson.Parser, b []byte) (*fastjson.Value, error) {
	if bytes.Contains(b, []byte("Infinity")) {
		b = shortenInfinity(b)
	}
	v, err := p.ParseBytes(b)
	if err != nil {
		return nil, err
	}
	lastWins(v)
	return v, nil
}

// shortenInfinity returns b with each Infinity outside strings, which
// json.loads takes and fastjson does not (it reads Inf), written Inf. It
// copies b: a request body must not change under its reader.
func shortenInfinity(b []byte) []byte {
	out := make([]byte, 0, len(b))
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && c == '\\' && i+1 < len(b):
			out = append(out, c, b[i+1])
			i++
			continue
		case c == '"':
			inString = !inString
		case !inString && bytes.HasPrefix(b[i:], []byte("Infinity")):
			out = append(out, "Inf"...)
			i += len("Infinity") - 1
			continue
		}
		out = append(out, c)
	}
	return out
}

// lastWins removes from every object in v each member whose key occurs
// again later in the same object.
func lastWins(v *fastjson.Value) {
	switch v.Type() {
	case fastjson.TypeArray:
		for _, e := range v.GetArray() {
			if t := e.Type(); t == fastjson.TypeObject || t == fastjson.TypeArray {
				lastWins(e)
			}
		}
	case fastjson.TypeObject:
		o := v.GetObject()
		if o.Len() > 1 {
			dropEarlierDuplicates(o)
		}
		o.Visit(func(_ []byte, e *fastjson.Value) {
			if t := e.Type(); t == fastjson.TypeObject || t == fastjson.TypeArray {
				lastWins(e)
			}
		})
	}
}

// dropEarlierDuplicates deletes every member of o whose key comes again
// later. Object.Del deletes the first member with a key, so deleting a key
// once per later occurrence leaves only its last member.
func dropEarlierDuplicates(o *fastjson.Object) {
	var arr [16][]byte
	keys := arr[:0]
	o.Visit(func(k []byte, _ *fastjson.Value) { keys = append(keys, k) })
	if len(keys) > len(arr) {
		dropEarlierDuplicatesMap(o, keys)
		return
	}
	for i, k := range keys {
		for _, l := range keys[i+1:] {
			if bytes.Equal(k, l) {
				o.Del(string(k))
				break
			}
		}
	}
}

// dropEarlierDuplicatesMap is dropEarlierDuplicates for large objects,
// which a quadratic scan would make slow.
func dropEarlierDuplicatesMap(o *fastjson.Object, keys [][]byte) {
	count := make(map[string]int, len(keys))
	for _, k := range keys {
		count[string(k)]++
	}
	for k, n := range count {
		for ; n > 1; n-- {
			o.Del(k)
		}
	}
}
