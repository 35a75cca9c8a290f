package hostile

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// sampleEvery is how often the monitor reads pdlb's RSS and
	// descriptors.
	sampleEvery = 25 * time.Millisecond
	// safetyRSS is where the monitor kills pdlb to protect the machine,
	// the 4 GiB cap under which the issue saw pdlb crash. The attack then
	// fails, on its RSS and on pdlb's death.
	safetyRSS = 4 << 30
)

// sample is one reading of pdlb's resources.
type sample struct {
	at  time.Time
	rss int64 // bytes
	fds int
}

// monitor samples a process's RSS and open descriptors from /proc until
// stopped, and kills it past safetyRSS.
type monitor struct {
	p    *proc
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	samples []sample
	killed  int64 // the RSS at which it killed the process, 0 if it did not
}

func startMonitor(p *proc) *monitor {
	m := &monitor{p: p, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	return m
}

func (m *monitor) run() {
	defer close(m.done)
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for {
		s, err := readSample(m.p.pid())
		if err == nil {
			m.mu.Lock()
			m.samples = append(m.samples, s)
			if s.rss > safetyRSS && m.killed == 0 {
				m.killed = s.rss
				m.p.kill()
			}
			m.mu.Unlock()
		}
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
	}
}

// close stops the sampling.
func (m *monitor) close() {
	close(m.stop)
	<-m.done
}

// latest returns the latest sample.
func (m *monitor) latest() sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) == 0 {
		return sample{}
	}
	return m.samples[len(m.samples)-1]
}

// peak returns the largest RSS and descriptor count sampled from t on.
func (m *monitor) peak(from time.Time) (rss int64, fds int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.samples {
		if !s.at.Before(from) {
			rss, fds = max(rss, s.rss), max(fds, s.fds)
		}
	}
	return rss, fds
}

// killedAt returns the RSS at which the monitor killed the process, 0 if
// it did not.
func (m *monitor) killedAt() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.killed
}

// readSample reads pid's RSS and open descriptors.
func readSample(pid int) (sample, error) {
	s := sample{at: time.Now()}
	st, err := procStatus(pid)
	if err != nil {
		return s, err
	}
	s.rss = st["VmRSS"]
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	s.fds = len(fds)
	return s, err
}

// hwm returns pid's peak RSS since it started (VmHWM), in bytes.
func hwm(pid int) (int64, error) {
	st, err := procStatus(pid)
	return st["VmHWM"], err
}

// procStatus returns the sizes of /proc/pid/status (VmRSS, VmHWM, ...) in
// bytes.
func procStatus(pid int) (map[string]int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		kb, unit, _ := strings.Cut(strings.TrimSpace(rest), " ")
		if n, err := strconv.ParseInt(kb, 10, 64); ok && err == nil && unit == "kB" {
			out[name] = n << 10
		}
	}
	return out, sc.Err()
}

// mib formats a byte count for people.
func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }
