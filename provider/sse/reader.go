package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxEvent is the providers' limit on a line and on an event's data:
// 32 MiB, the line the SDKs' scanner allowed (bufio.MaxScanTokenSize<<9),
// so that every event the SDKs took in one line is still taken. The SDKs
// let an event's data grow without bound across lines; Reader does not.
// The largest events an answer carries — a compatible server's whole tool
// call in one chunk — are a few hundred KiB.
const MaxEvent = 32 << 20

// ErrTooLarge is why a stream with a line or an event's data longer than
// its Reader's limit ended.
var ErrTooLarge = errors.New("sse: event too large")

const (
	// firstBuffer is the read buffer a stream starts with: room for an
	// event or two of an answer. A stream held open in silence — waiting
	// for its first token, as an idle stream does — keeps no more than
	// this while it waits.
	firstBuffer = 512
	// readBuffer is what a buffer that reads fill to the brim grows to
	// (events come faster than they are taken): room for a few events of
	// an answer per read, as the SDKs' scanner had from the start.
	readBuffer = 4 << 10
	// keepBuffer is the largest buffer kept from one event to the next;
	// one grown larger for an outsized event is let go after it.
	keepBuffer = 64 << 10
	// maxEmptyReads is how many reads in a row may return nothing before
	// the body is taken as broken (io.ErrNoProgress), as bufio does.
	maxEmptyReads = 100
)

// bom is the UTF-8 byte order mark a stream may start with.
const bom = "\xEF\xBB\xBF"

// Event is one dispatched event. Its slices are Reader's buffers: valid
// until the next call to Next.
type Event struct {
	// Type is the value of the event's last "event" field; empty when it
	// had none (the standard's "message").
	Type []byte
	// Data is the values of its "data" fields, joined with LF.
	Data []byte
}

// Reader reads the events of one stream. It is not safe for concurrent use.
type Reader struct {
	r     io.Reader
	limit int

	buf        []byte // read buffer; buf[start:end] is not read yet
	start, end int
	readErr    error // the error of the last read, once it came
	full       bool  // the last read filled the buffer: more may be waiting
	begun      bool  // the byte order mark was looked for
	cr         bool  // the last line ended with CR: an LF right after it is part of it

	typ  []byte // event type buffer
	data []byte // data buffer
	ev   Event
	err  error // why the stream ended; io.EOF for its end
}

// NewReader returns a Reader of r whose lines and events' data may not be
// longer than limit bytes (MaxEvent when limit <= 0).
func NewReader(r io.Reader, limit int) *Reader {
	if limit <= 0 {
		limit = MaxEvent
	}
	return &Reader{r: r, limit: limit}
}

// Next reads up to the next event and reports whether there is one; at
// the end of the stream, or on an error, it returns false and Err says
// which.
func (r *Reader) Next() bool {
	if r.err != nil {
		return false
	}
	// The last event's buffers are free now.
	r.typ, r.data = reuse(r.typ), reuse(r.data)
	for {
		line, ok := r.line()
		if !ok {
			return false
		}
		if len(line) == 0 {
			if len(r.data) == 0 {
				r.typ = r.typ[:0]
				continue
			}
			r.ev = Event{Type: r.typ, Data: r.data[:len(r.data)-1]} // without the last LF
			return true
		}
		if !r.field(line) {
			r.err = fmt.Errorf("%w: data over %d bytes", ErrTooLarge, r.limit)
			return false
		}
	}
}

// Event is the event Next read.
func (r *Reader) Event() Event { return r.ev }

// Err is why the stream ended: nil at the end of the body, ErrTooLarge
// (wrapped), or the body's read error.
func (r *Reader) Err() error {
	if r.err == io.EOF {
		return nil
	}
	return r.err
}

// reuse empties a buffer for the next event, or lets it go if an outsized
// event grew it.
func reuse(b []byte) []byte {
	if cap(b) > keepBuffer {
		return nil
	}
	return b[:0]
}

// field interprets one line that is not blank; false when the data would
// grow over the limit.
func (r *Reader) field(line []byte) bool {
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		if i == 0 {
			return true // a comment
		}
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		if len(r.data)+len(value)+1 > r.limit+1 { // the last LF is not data
			return false
		}
		r.data = append(r.data, value...)
		r.data = append(r.data, '\n')
	case "event":
		r.typ = append(r.typ[:0], value...)
	}
	return true
}

// line returns the next line without its end, a slice of the read buffer
// valid until the next call; false when the stream ended first (r.err
// says why). A last line the body ends without ending is dropped with the
// event it belongs to.
func (r *Reader) line() ([]byte, bool) {
	for {
		if r.start < r.end && r.ready() {
			b := r.buf[r.start:r.end]
			if r.cr {
				r.cr = false
				if b[0] == '\n' {
					r.start++
					continue
				}
			}
			i := lineEnd(b)
			if i > r.limit || (i < 0 && len(b) > r.limit) {
				r.err = fmt.Errorf("%w: a line over %d bytes", ErrTooLarge, r.limit)
				return nil, false
			}
			if i >= 0 {
				r.start += i + 1
				r.cr = b[i] == '\r'
				return b[:i], true
			}
		}
		if r.readErr != nil {
			r.err = r.readErr
			return nil, false
		}
		r.fill()
	}
}

// ready reports whether the unread bytes can be taken as lines: once the
// stream's first bytes showed whether it starts with a byte order mark,
// which is dropped.
func (r *Reader) ready() bool {
	if r.begun {
		return true
	}
	b := r.buf[r.start:r.end]
	if len(b) < len(bom) && bytes.HasPrefix([]byte(bom), b) && r.readErr == nil {
		return false // too few bytes to tell
	}
	r.begun = true
	if bytes.HasPrefix(b, []byte(bom)) {
		r.start += len(bom)
	}
	return r.start < r.end
}

// lineEnd is the index of the first CR or LF in b, or -1.
func lineEnd(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	head := b
	if i >= 0 {
		head = b[:i]
	}
	// CR alone ends lines too; it is rare, and looked for only before the first LF.
	if j := bytes.IndexByte(head, '\r'); j >= 0 {
		return j
	}
	return i
}

// fill reads more of the body after what is unread, making room first:
// the unread bytes move to the front, into a buffer grown when they fill
// it or when the last read did, or back into a smaller one when an
// outsized line grew it.
func (r *Reader) fill() {
	unread := r.end - r.start
	switch {
	case r.buf == nil:
		r.buf = make([]byte, firstBuffer)
	case cap(r.buf) > keepBuffer && unread < readBuffer:
		r.buf = r.moved(readBuffer)
	case unread == len(r.buf):
		// A line longer than the buffer. It grows up to a byte over the
		// limit: full then, without a line end, it holds a line too long.
		r.buf = r.moved(min(2*len(r.buf), r.limit+1))
	case r.full && len(r.buf) < readBuffer:
		r.buf = r.moved(readBuffer)
	default:
		copy(r.buf, r.buf[r.start:r.end])
	}
	r.start, r.end = 0, unread
	for range maxEmptyReads {
		n, err := r.r.Read(r.buf[r.end:])
		r.end += n
		r.full = r.end == len(r.buf)
		if err != nil {
			r.readErr = err
			return
		}
		if n > 0 {
			return
		}
	}
	r.readErr = io.ErrNoProgress
}

// moved is a new buffer of size bytes holding the unread bytes at its front.
func (r *Reader) moved(size int) []byte {
	b := make([]byte, size)
	copy(b, r.buf[r.start:r.end])
	return b
}

// ErrorEvent is the upstream's failure reported inside the 200 stream —
// Anthropic's `event: error`, an OpenAI chunk holding "error" — as the
// error that ends the stream; the provider classifies Data
// (classify.Attempt.StreamError).
type ErrorEvent struct {
	// Data is the event's data, a view valid until the Reader's next Next.
	Data []byte
}

// Error says that the upstream reported an error; Data says which.
func (e *ErrorEvent) Error() string { return "sse: error event in the stream" }
