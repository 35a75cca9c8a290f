package lb

import (
	"bufio"
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkReadBody sends a body pdlb reads whole and then refuses (it is
// no JSON object), with Content-Length and chunked, at two sizes: the
// MB/s must not fall with the size, nor differ much between the two
// framings (issue 19: a 260 MB chunked body took 116 CPU-seconds).
func BenchmarkReadBody(b *testing.B) {
	for _, size := range []int{1 << 20, 32 << 20} {
		for _, chunked := range []bool{false, true} {
			name := fmt.Sprintf("%dMiB/fixed", size>>20)
			if chunked {
				name = fmt.Sprintf("%dMiB/chunked", size>>20)
			}
			b.Run(name, func(b *testing.B) { benchmarkReadBody(b, size, chunked) })
		}
	}
}

func benchmarkReadBody(b *testing.B, size int, chunked bool) {
	h := newHarness(b)
	cfg := defaultConfig()
	cfg.MaxRequestBodySize = 64 << 20
	h.start(cfg)
	req := requestOf(size, chunked)
	conn, err := h.nw.Dial("pdlb:8000")
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	var resp fasthttp.Response
	b.SetBytes(int64(size))
	b.ResetTimer()
	for b.Loop() {
		go func() { _, _ = conn.Write(req) }()
		if err := resp.Read(br); err != nil || resp.StatusCode() != fasthttp.StatusBadRequest {
			b.Fatalf("got %d %v; want a 400", resp.StatusCode(), err)
		}
	}
}

// requestOf is a /generate request with a body of size bytes that is no
// JSON object, chunked in 4 KiB pieces or not.
func requestOf(size int, chunked bool) []byte {
	var r strings.Builder
	if !chunked {
		fmt.Fprintf(&r, "POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Length: %d\r\n\r\n[%s", size, strings.Repeat(" ", size-1))
		return []byte(r.String())
	}
	r.WriteString("POST /generate HTTP/1.1\r\nHost: pdlb\r\nTransfer-Encoding: chunked\r\n\r\n")
	const piece = 4 << 10
	for left := size; left > 0; left -= piece {
		n := min(piece, left)
		fmt.Fprintf(&r, "%x\r\n[%s\r\n", n, strings.Repeat(" ", n-1))
	}
	r.WriteString("0\r\n\r\n")
	return []byte(r.String())
}
