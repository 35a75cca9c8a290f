package wire

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
)

// blockingDial is a dial that holds every caller until release is closed,
// then hands out one end of a pipe. It records what it made, and how many
// dials ran at once.
type blockingDial struct {
	release chan struct{}
	mu      sync.Mutex
	made    []*closeRecorder
	now     atomic.Int32
	most    atomic.Int32
}

type closeRecorder struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeRecorder) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

func newBlockingDial() *blockingDial { return &blockingDial{release: make(chan struct{})} }

func (b *blockingDial) dial(string, time.Duration) (net.Conn, error) {
	n := b.now.Add(1)
	defer b.now.Add(-1)
	for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
	}
	<-b.release
	c1, c2 := net.Pipe()
	_ = c2.Close()
	c := &closeRecorder{Conn: c1}
	b.mu.Lock()
	b.made = append(b.made, c)
	b.mu.Unlock()
	return c, nil
}

// startDialers makes dialers whose goroutines the test stops, and waits for,
// when it ends.
func startDialers(t *testing.T, dial fasthttp.DialFuncWithTimeout) *Dialers {
	quit := make(chan struct{})
	d := NewDialers(dial, time.Minute, quit)
	t.Cleanup(func() {
		close(quit)
		settled(t, "the dialer goroutines to exit", func() bool { return d.counts() == [2]int{0, 0} })
	})
	return d
}

// counts returns how many dialer goroutines run, and how many of them idle.
func (d *Dialers) counts() [2]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return [2]int{d.running, len(d.idle)}
}

func (d *Dialers) queued() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue)
}

// dialAsync dials with d in the background and sends the outcome to errs.
func dialAsync(d *Dialers, errs chan<- error) {
	go func() {
		c, err := d.Dial("worker:1", 5*time.Second)
		if err == nil {
			_ = c.Close()
		}
		errs <- err
	}()
}

// settled waits, in a synctest bubble, until every goroutine of the
// bubble is blocked, and wants cond to hold then.
func settled(t *testing.T, what string, cond func() bool) {
	t.Helper()
	synctest.Wait()
	if !cond() {
		t.Fatalf("once every goroutine waits, %s has not happened", what)
	}
}

// Dials one after another reuse one goroutine.
func TestDialersReuseTheirGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlockingDial()
		close(b.release)
		d := startDialers(t, b.dial)
		for range 20 {
			c, err := d.Dial("worker:1", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.Close()
			settled(t, "the dialer to be idle again", func() bool { return d.counts()[1] == 1 })
		}
		if got := d.counts(); got != [2]int{1, 1} {
			t.Fatalf("running, idle = %v after 20 dials in turn; want one goroutine, idle", got)
		}
	})
}

// A burst runs at most maxDialers dials at once; the rest wait their turn,
// and every caller gets its connection.
func TestDialersBoundTheirGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlockingDial()
		d := startDialers(t, b.dial)
		const callers = maxDialers + 20
		errs := make(chan error, callers)
		for range callers {
			dialAsync(d, errs)
		}
		settled(t, "the burst to fill the dialers and queue the rest", func() bool {
			return b.now.Load() == maxDialers && d.queued() == callers-maxDialers
		})
		if got := d.counts(); got != [2]int{maxDialers, 0} {
			t.Fatalf("running, idle = %v with every dialer busy; want %d, 0", got, maxDialers)
		}
		close(b.release)
		for range callers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if most := b.most.Load(); most != maxDialers {
			t.Fatalf("%d dials ran at once; want at most (and here exactly) %d", most, maxDialers)
		}
	})
}

// A dial beyond a full queue runs on its caller's goroutine at once.
func TestDialBeyondTheQueueRunsOnTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlockingDial()
		d := startDialers(t, b.dial)
		const callers = maxDialers + maxQueuedDials + 1
		errs := make(chan error, callers)
		for range callers - 1 {
			dialAsync(d, errs)
		}
		settled(t, "the dialers and the queue to fill", func() bool {
			return b.now.Load() == maxDialers && d.queued() == maxQueuedDials
		})
		dialAsync(d, errs)
		settled(t, "the last caller to dial itself", func() bool { return b.now.Load() == maxDialers+1 })
		close(b.release)
		for range callers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A caller whose time runs out first gets a dial timeout, and the connection
// made for it meanwhile is closed, not leaked.
func TestAbandonedDialIsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlockingDial()
		d := startDialers(t, b.dial)
		_, err := d.Dial("worker:1", 20*time.Millisecond)
		if !errors.Is(err, fasthttp.ErrDialTimeout) {
			t.Fatalf("got %v; want %v", err, fasthttp.ErrDialTimeout)
		}
		close(b.release)
		settled(t, "the late connection to be made and closed", func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.made) == 1 && b.made[0].closed.Load()
		})
	})
}

// A dial takes at most the connect timeout, however long its request may
// still run.
func TestDialTakesAtMostTheConnectTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlockingDial()
		d := startDialers(t, b.dial)
		d.connectTimeout = 20 * time.Millisecond
		if _, err := d.Dial("worker:1", time.Hour); !errors.Is(err, fasthttp.ErrDialTimeout) {
			t.Fatalf("got %v; want %v", err, fasthttp.ErrDialTimeout)
		}
		close(b.release)
	})
}

// An idle goroutine exits after idleFor; the next dial starts another.
func TestIdleDialerExits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlockingDial()
		close(b.release)
		d := startDialers(t, b.dial)
		d.idleFor = 10 * time.Millisecond
		for range 2 {
			c, err := d.Dial("worker:1", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.Close()
			time.Sleep(d.idleFor) // on the bubble's clock
			settled(t, "the idle dialer to exit", func() bool { return d.counts() == [2]int{0, 0} })
		}
	})
}

// Once the server quits, the goroutines exit, a dial waiting on one runs on
// its caller's goroutine instead, and so do later dials.
func TestDialersQuit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlockingDial()
		quit := make(chan struct{})
		d := NewDialers(b.dial, time.Minute, quit)
		type result struct {
			conn net.Conn
			err  error
		}
		got := make(chan result, 1)
		go func() {
			c, err := d.Dial("worker:1", 5*time.Second)
			got <- result{c, err}
		}()
		settled(t, "a dial to start", func() bool { return b.now.Load() == 1 })
		close(quit)
		settled(t, "the caller to dial itself", func() bool { return b.now.Load() == 2 })
		close(b.release)
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		settled(t, "the dialer goroutine to exit", func() bool { return d.counts() == [2]int{0, 0} })
		settled(t, "the dialer's late connection to be closed", func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.made) == 2 && b.made[0].closed.Load() != b.made[1].closed.Load()
		})
		if r.conn.(*closeRecorder).closed.Load() {
			t.Fatal("the caller got the connection that was closed")
		}
		_ = r.conn.Close()
		c, err := d.Dial("worker:1", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		if got := d.counts(); got != [2]int{0, 0} {
			t.Fatalf("running, idle = %v after quit; want no goroutine", got)
		}
	})
}
