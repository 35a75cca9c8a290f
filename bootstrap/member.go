package bootstrap

import "strconv"

// Member returns the raw value of body's top-level member name as the
// workers' json.loads reads it: keys compared once decoded
// ("r\u0069d" is "rid"), and the last of duplicates winning. It returns nil
// when there is no such member or body is not a well-formed object. name
// must be printable ASCII of at most 22 bytes, without quotes or
// backslashes. The value is a slice of body; Member does not allocate.
//
// It is for the fields lb reads outside Parse (a request's rid, which it
// aborts by): a reader that took the first duplicate, or compared raw
// keys, would act on a request other than the one the worker runs.
func Member(body []byte, name string) []byte {
	if len(name) > maxFieldLen {
		panic("BUG: bootstrap.Member cannot look up a name longer than " + strconv.Itoa(maxFieldLen) + " bytes: " + name)
	}
	ms, err := newMembers(body)
	if err != nil {
		return nil
	}
	var v []byte
	for {
		m, ok, err := ms.next()
		if err != nil {
			return nil
		}
		if !ok {
			return v
		}
		if keyIs(&m, name) {
			v = m.value
		}
	}
}

// keyIs reports whether m's key decodes to name, a name Member takes.
func keyIs(m *member, name string) bool {
	if !m.escaped {
		return string(m.key) == name
	}
	var buf [maxFieldLen]byte
	n, ok := unescapeASCII(&buf, m.key)
	return ok && string(buf[:n]) == name
}
