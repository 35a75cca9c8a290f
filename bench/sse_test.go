package bench

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll returns the data of every event in stream and the error that
// ended it.
func readAll(t *testing.T, r io.Reader) ([]string, error) {
	t.Helper()
	var s sseReader
	s.reset(r)
	var events []string
	for {
		data, _, err := s.next()
		if err != nil {
			return events, err
		}
		events = append(events, string(data))
	}
}

func TestSSEReader(t *testing.T) {
	f := func(stream string, want ...string) {
		t.Helper()
		for name, r := range map[string]io.Reader{
			"whole":    strings.NewReader(stream),
			"byte":     iotest.OneByteReader(strings.NewReader(stream)),
			"half":     iotest.HalfReader(strings.NewReader(stream)),
			"data+EOF": iotest.DataErrReader(strings.NewReader(stream)),
		} {
			got, err := readAll(t, r)
			if !errors.Is(err, io.EOF) {
				t.Fatalf("%s read of %q: got error %v; want io.EOF", name, stream, err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s read of %q: got %q; want %q", name, stream, got, want)
			}
		}
	}
	f("")
	f("data: {\"a\":1}\n\ndata: [DONE]\n\n", `{"a":1}`, "[DONE]")
	f("data:{\"a\":1}\r\n\r\ndata:  two spaces\r\n\r\n", `{"a":1}`, " two spaces")
	f("data: a\ndata: b\n\n", "a\nb")
	f(": keep-alive\n\nevent: message\nid: 7\ndata: x\nretry: 5\n\n", "x")
	f("\n\n\ndata: x\n\n\n\n", "x")
	f("data: x\n\ndata: [DONE]\n", "x", "[DONE]")
	f("data: x\n\ndata: [DONE]", "x", "[DONE]")
	f("data\n\nnot a field\n\ndata:\n\n", "", "")
	long := strings.Repeat("y", 3*sseBufSize)
	f("data: "+long+"\n\ndata: z\n\n", long, "z")
}

func TestSSEReaderError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom))
	got, err := readAll(t, r)
	if !errors.Is(err, boom) {
		t.Fatalf("got error %v; want %v", err, boom)
	}
	// The cut event is still returned; the caller sees no [DONE] after it.
	if want := []string{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("got %q; want %q", got, want)
	}
}
