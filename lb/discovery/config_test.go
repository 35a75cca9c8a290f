package discovery

import (
	"strings"
	"testing"
	"time"
)

// New refuses what cannot be used, naming it.
func TestNewRefuses(t *testing.T) {
	f := func(cfg Config, want string) {
		t.Helper()
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got error %v; want one containing %q", err, want)
		}
	}
	f(Config{Interval: -time.Second}, "refresh interval")
	f(Config{RemoveAfter: -time.Second}, "remove-after")
	f(Config{Port: 70000}, "default worker port 70000")
	f(Config{Scheme: "ftp"}, `scheme "ftp"`)
	f(Config{Server: "127.0.0.1"}, `DNS server "127.0.0.1"`)
	f(Config{Prefill: []string{"p.pdlb.test:http"}}, `port "http" of prefill name`)
	f(Config{Decode: []string{"d.pdlb.test:0"}}, `port "0" of decode name`)
	f(Config{Fallback: []string{":30000"}}, `fallback name ":30000" has no host`)
	f(Config{Decode: []string{""}}, `decode name "" has no host`)
	f(Config{Decode: []string{"a:b:c"}}, `cannot parse decode name "a:b:c"`)
}

// A name is NAME or NAME:PORT; a bare IPv6 literal is a NAME.
func TestParseName(t *testing.T) {
	f := func(spec, host string, port int) {
		t.Helper()
		n, err := parseName(Decode, spec, 80)
		if err != nil {
			t.Fatalf("cannot parse %q: %s", spec, err)
		}
		if n.host != host || n.port != port {
			t.Fatalf("got %q, %d from %q; want %q, %d", n.host, n.port, spec, host, port)
		}
	}
	f("d.pdlb.test", "d.pdlb.test", 80)
	f("d.pdlb.test.", "d.pdlb.test.", 80)
	f("d.pdlb.test:30000", "d.pdlb.test", 30000)
	f("10.0.0.1:30000", "10.0.0.1", 30000)
	f("fd00::1", "fd00::1", 80)
	f("[fd00::1]:30000", "fd00::1", 30000)
	f("::ffff:10.0.0.1", "::ffff:10.0.0.1", 80)
}

// The defaults are the flags' and sglang_router's.
func TestDefaults(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatalf("cannot build a source from the zero Config: %s", err)
	}
	if s.cfg.Interval != 5*time.Second || s.cfg.RemoveAfter != 30*time.Second || s.cfg.Port != 80 || s.cfg.Scheme != "http" {
		t.Fatalf("got defaults %s, %s, %d, %q; want 5s, 30s, 80, http", s.cfg.Interval, s.cfg.RemoveAfter, s.cfg.Port, s.cfg.Scheme)
	}
}
