package lb

import "testing"

// The budget refuses what would cross its limit, counts the refusal, and
// asks for free memory to go back to the OS when a large block comes back,
// not for each small one.
func TestBodyMemory(t *testing.T) {
	m := newBodyMemory(3 * largeBlock)
	if !m.take(2*largeBlock) || !m.take(largeBlock) {
		t.Fatal("refused bytes within the limit")
	}
	if m.take(1) || m.refused.Load() != 1 || m.used.Load() != 3*largeBlock {
		t.Fatalf("took a byte past the limit: used %d, refused %d", m.used.Load(), m.refused.Load())
	}
	m.give(largeBlock - 1)
	select {
	case <-m.large:
		t.Fatal("a small block asked for memory to go back to the OS")
	default:
	}
	m.give(2*largeBlock + 1)
	select {
	case <-m.large:
	default:
		t.Fatal("a large block did not ask for memory to go back to the OS")
	}
	if m.used.Load() != 0 {
		t.Fatalf("used %d after giving everything back", m.used.Load())
	}
	defer func() {
		if recover() == nil {
			t.Fatal("giving back more than was taken did not panic")
		}
	}()
	m.give(1)
}
