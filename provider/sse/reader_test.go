package sse

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// ev is an event as a test writes it.
type ev struct{ typ, data string }

// readAll reads every event of body through a Reader of r.
func readAll(r io.Reader, limit int) ([]ev, error) {
	sr := NewReader(r, limit)
	var out []ev
	for sr.Next() {
		e := sr.Event()
		out = append(out, ev{string(e.Type), string(e.Data)})
	}
	return out, sr.Err()
}

// readers are the ways a body arrives: whole, a byte per read, half of what
// is asked per read, and with the last bytes' read returning io.EOF too.
var readers = map[string]func(string) io.Reader{
	"whole":    func(s string) io.Reader { return strings.NewReader(s) },
	"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
	"half":     func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
	"data+EOF": func(s string) io.Reader { return iotest.DataErrReader(strings.NewReader(s)) },
}

func TestFraming(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want []ev
	}{
		{"empty body", "", nil},
		{"one event", "data: {}\n\n", []ev{{"", "{}"}}},
		{"data without the space", "data:{}\n\n", []ev{{"", "{}"}}},
		{"only one space is dropped", "data:  x \n\n", []ev{{"", " x "}}},
		{"multi-line data joined with LF", "data: a\ndata:b\ndata\n\n", []ev{{"", "a\nb\n"}}},
		{"empty data is an event", "data:\n\n", []ev{{"", ""}}},
		{"a field without a colon", "data\n\n", []ev{{"", ""}}},
		{"named events", "event: message_start\ndata: 1\n\nevent: ping\ndata: 2\n\ndata: 3\n\n",
			[]ev{{"message_start", "1"}, {"ping", "2"}, {"", "3"}}},
		{"the last event field wins", "event: a\nevent: b\ndata: x\n\n", []ev{{"b", "x"}}},
		{"an event without data is not dispatched and forgets its name", "event: a\n\ndata: x\n\n", []ev{{"", "x"}}},
		{"an error event", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n",
			[]ev{{"error", `{"type":"error","error":{"type":"overloaded_error"}}`}}},
		{"comments and keep-alives", ": keep-alive\n\n:\ndata: x\n: inside\n\n: bye\n\n", []ev{{"", "x"}}},
		{"id, retry and other fields are ignored", "id: 7\nretry: 100\nfoo: bar\ndata: x\n\n", []ev{{"", "x"}}},
		{"field names are case-sensitive", "Data: x\nDATA: y\ndata: z\n\n", []ev{{"", "z"}}},
		{"CRLF", "event: a\r\ndata: x\r\n\r\ndata: y\r\n\r\n", []ev{{"a", "x"}, {"", "y"}}},
		{"CR", "event: a\rdata: x\r\rdata: y\r\r", []ev{{"a", "x"}, {"", "y"}}},
		{"mixed line ends", "data: a\rdata: b\r\ndata: c\n\r\ndata: d\n\r\n", []ev{{"", "a\nb\nc"}, {"", "d"}}},
		{"CR CR is a blank line", "data: x\r\r\ndata: y\n\n", []ev{{"", "x"}, {"", "y"}}},
		{"blank lines between events", "\n\n\r\ndata: x\n\n\n\n", []ev{{"", "x"}}},
		{"a final event without a blank line is dropped", "data: x\n\ndata: y\n", []ev{{"", "x"}}},
		{"a final line without its end is dropped", "data: x\n\ndata: y", []ev{{"", "x"}}},
		{"[DONE]", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []ev{{"", `{"a":1}`}, {"", "[DONE]"}}},
		{"a byte order mark first is dropped", "\xEF\xBB\xBFdata: x\n\n", []ev{{"", "x"}}},
		{"a byte order mark later is part of the line", "data: x\n\n\xEF\xBB\xBFdata: y\n\ndata: z\n\n", []ev{{"", "x"}, {"", "z"}}},
		{"a body that is only part of a byte order mark", "\xEF\xBB", nil},
		{"a body that starts like a byte order mark", "\xEFdata: x\n\ndata: y\n\n", []ev{{"", "y"}}},
		{"a colon in the value", "data: a:b: c\n\n", []ev{{"", "a:b: c"}}},
		{"UTF-8 and NUL pass through", "data: héllo\x00\n\n", []ev{{"", "héllo\x00"}}},
	} {
		for rname, reader := range readers {
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				got, err := readAll(reader(tc.body), 0)
				if err != nil {
					t.Fatalf("err %v", err)
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("events\n got %q\nwant %q", got, tc.want)
				}
			})
		}
	}
}

func TestLimits(t *testing.T) {
	const limit = 64
	long := strings.Repeat("x", limit)
	for _, tc := range []struct {
		name string
		body string
		want []ev // before the error
		err  error
	}{
		{"a line of the limit", "data:" + long[5:] + "\n\n", []ev{{"", long[5:]}}, nil},
		{"a line of the limit in CRLF", "data:" + long[5:] + "\r\n\r\n", []ev{{"", long[5:]}}, nil},
		{"a line over the limit", "data: x\n\ndata:" + long + "\n\n", []ev{{"", "x"}}, ErrTooLarge},
		{"a comment over the limit", ":" + long + "\n\n", nil, ErrTooLarge},
		{"a line over the limit without an end", "data:" + long + "x", nil, ErrTooLarge},
		{"data over the limit across lines", "data:" + long[:40] + "\ndata:" + long[:40] + "\n\n", nil, ErrTooLarge},
		{"data of the limit across lines", "data:" + long[:30] + "\ndata:" + long[:33] + "\n\n", []ev{{"", long[:30] + "\n" + long[:33]}}, nil},
	} {
		for rname, reader := range readers {
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				got, err := readAll(reader(tc.body), limit)
				if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("events\n got %q\nwant %q", got, tc.want)
				}
			})
		}
	}
}

func TestLongLinesUnderTheLimit(t *testing.T) {
	// Lines longer than the read buffer grow it; the buffers go back to
	// their usual size for what follows the outsized event.
	long := strings.Repeat("y", 3*keepBuffer)
	for rname, reader := range readers {
		t.Run(rname, func(t *testing.T) {
			r := NewReader(io.MultiReader(reader("data: a\n\ndata: "+long+"\n\n"), reader("data: b\n\n")), 0)
			var got []string
			for r.Next() {
				got = append(got, string(r.Event().Data))
			}
			if r.Err() != nil || len(got) != 3 || got[0] != "a" || got[1] != long || got[2] != "b" {
				t.Fatalf("err %v, %d events", r.Err(), len(got))
			}
			if cap(r.buf) > keepBuffer || cap(r.data) > keepBuffer {
				t.Errorf("read buffer %d, data buffer %d bytes: not let go after the outsized event", cap(r.buf), cap(r.data))
			}
		})
	}
}

func TestBufferGrowsWhenReadsFillIt(t *testing.T) {
	// A stream whose events come one read at a time keeps the small first
	// buffer, which is all a silent stream holds; one whose reads fill it
	// gets room for several events per read.
	event := "data: " + strings.Repeat("x", 100) + "\n\n"
	trickle := NewReader(iotest.OneByteReader(strings.NewReader(strings.Repeat(event, 20))), 0)
	burst := NewReader(strings.NewReader(strings.Repeat(event, 20)), 0)
	for _, r := range []*Reader{trickle, burst} {
		n := 0
		for r.Next() {
			n++
		}
		if r.Err() != nil || n != 20 {
			t.Fatalf("err %v, %d events", r.Err(), n)
		}
	}
	if cap(trickle.buf) != firstBuffer || cap(burst.buf) != readBuffer {
		t.Errorf("buffers of %d and %d bytes, want %d one read at a time and %d for full reads",
			cap(trickle.buf), cap(burst.buf), firstBuffer, readBuffer)
	}
}

func TestReadErrors(t *testing.T) {
	broken := errors.New("connection reset")
	r := NewReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b\n"), iotest.ErrReader(broken)), 0)
	if !r.Next() || string(r.Event().Data) != "a" {
		t.Fatal("the event before the error was lost")
	}
	if r.Next() || !errors.Is(r.Err(), broken) {
		t.Fatalf("err %v, want the read's", r.Err())
	}
	if r.Next() {
		t.Fatal("Next after the end")
	}

	silent := NewReader(emptyReads{}, 0)
	if silent.Next() || !errors.Is(silent.Err(), io.ErrNoProgress) {
		t.Fatalf("a body that reads nothing forever: err %v", silent.Err())
	}
}

// emptyReads reads nothing, without an error, forever.
type emptyReads struct{}

func (emptyReads) Read([]byte) (int, error) { return 0, nil }

func TestNoAllocationsPerEvent(t *testing.T) {
	event := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" word\"}}\n\n"
	body := strings.Repeat(event, 1000)
	src := strings.NewReader(body)
	r := NewReader(src, 0)
	r.Next() // the buffers grow to size
	allocs := testing.AllocsPerRun(500, func() {
		if !r.Next() || !bytes.HasPrefix(r.Event().Data, []byte(`{"type"`)) {
			t.Fatal("no event")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per event", allocs)
	}
}
