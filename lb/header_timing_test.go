package lb

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkBadHeaderName measures the check every request gets, on the
// header of an OpenAI SDK's request.
func BenchmarkBadHeaderName(b *testing.B) {
	var req fasthttp.Request
	raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: pdlb:8000\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n" +
		"Accept: application/json\r\nContent-Type: application/json\r\nUser-Agent: OpenAI/Python 1.54.4\r\nX-Stainless-Lang: python\r\n" +
		"X-Stainless-Package-Version: 1.54.4\r\nX-Stainless-Retry-Count: 0\r\nAuthorization: Bearer sk-0123456789\r\n" +
		"X-Request-Id: 0123456789abcdef\r\nContent-Length: 2\r\n\r\n{}"
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if badHeaderName(&req.Header) != nil {
			b.Fatal("a good header refused")
		}
	}
}
