package bench

import (
	"bytes"
	"errors"
	"io"
	"time"
)

const (
	// sseBufSize is the starting read buffer; it grows for longer lines
	// (SGLang's /generate chunks repeat the whole text so far) up to
	// maxSSELine.
	sseBufSize = 8 << 10
	maxSSELine = 16 << 20
)

// errLineTooLong ends a stream whose line outgrows maxSSELine.
var errLineTooLong = errors.New("event stream line too long")

// sseReader splits an event stream into the data of its events, following
// the WHATWG "event stream interpretation" for the parts servers use: data
// lines are joined with '\n', other fields and comments are ignored, and a
// blank line ends an event. It reuses its buffers, so an event costs no
// allocation once they have grown. It is not safe for concurrent use.
type sseReader struct {
	r          io.Reader
	buf        []byte
	start, end int // unread bytes are buf[start:end]
	data       []byte
	hasData    bool
	at         time.Time // when the last Read returned bytes
	err        error     // the error that ended reading, if any
}

// reset starts reading a new stream from r.
func (s *sseReader) reset(r io.Reader) {
	if s.buf == nil {
		s.buf = make([]byte, sseBufSize)
	}
	s.r = r
	s.start, s.end = 0, 0
	s.hasData = false
	s.err = nil
}

// next returns the data of the next event and the time the read that
// completed it returned. The data is valid until the next call. At the end
// of the stream it returns the reader's error (io.EOF for a clean end);
// an event cut short by the end is still returned first, since a server
// that closes right after "data: [DONE]\n" means it.
func (s *sseReader) next() ([]byte, time.Time, error) {
	for {
		if i := bytes.IndexByte(s.buf[s.start:s.end], '\n'); i >= 0 {
			line := s.buf[s.start : s.start+i]
			s.start += i + 1
			if s.line(line) {
				return s.data, s.at, nil
			}
			continue
		}
		if s.err != nil {
			if s.start < s.end {
				s.line(s.buf[s.start:s.end])
				s.start = s.end
			}
			if s.hasData {
				s.hasData = false
				return s.data, s.at, nil
			}
			return nil, s.at, s.err
		}
		s.fill()
	}
}

// line takes in one line and reports whether it ended an event.
func (s *sseReader) line(line []byte) bool {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) == 0 {
		ended := s.hasData
		s.hasData = false
		return ended
	}
	var v []byte
	switch {
	case string(line) == "data" || string(line) == "data:":
		// An empty value; "data" alone is a field without a colon.
	case len(line) > 5 && string(line[:5]) == "data:":
		v = line[5:]
		if v[0] == ' ' {
			v = v[1:]
		}
	default:
		return false
	}
	if s.hasData {
		s.data = append(s.data, '\n')
	} else {
		s.data = s.data[:0]
		s.hasData = true
	}
	s.data = append(s.data, v...)
	return false
}

// fill reads more bytes, first making room for them.
func (s *sseReader) fill() {
	if s.start > 0 {
		s.end = copy(s.buf, s.buf[s.start:s.end])
		s.start = 0
	}
	if s.end == len(s.buf) {
		if len(s.buf) >= maxSSELine {
			s.err = errLineTooLong
			return
		}
		s.buf = append(s.buf, make([]byte, len(s.buf))...)
	}
	n, err := s.r.Read(s.buf[s.end:])
	if n > 0 {
		s.end += n
		s.at = time.Now()
	}
	if err != nil {
		s.err = err
	}
}
