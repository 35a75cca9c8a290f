package policy

import "testing"

// Every reason has a name of its own: metrics label by them.
func TestReasonNames(t *testing.T) {
	seen := map[string]Reason{}
	for _, r := range Reasons() {
		name := r.String()
		if name == "" {
			t.Errorf("reason %d has no name", r)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("reasons %d and %d are both %q", other, r, name)
		}
		seen[name] = r
	}
}

func TestAppendTokens(t *testing.T) {
	got := AppendTokens([]byte{9}, []uint32{0x04030201, 7})
	want := []byte{9, 1, 2, 3, 4, 7, 0, 0, 0}
	if string(got) != string(want) {
		t.Fatalf("got %v; want %v", got, want)
	}
}
