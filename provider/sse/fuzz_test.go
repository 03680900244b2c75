package sse

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// FuzzReader reads arbitrary bodies, arriving in arbitrary pieces, under a
// small limit, and checks the events against reference, a plain reading of
// the standard over the whole body at once.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"data: {}\n\n",
		"event: a\r\ndata: x\r\n\r\ndata: y\ry\r\r",
		": ping\n\nid: 1\nretry: 5\ndata\ndata:  z\n\n",
		"\xEF\xBB\xBFdata: x\n\ndata: [DONE]\n\n",
		"event: error\ndata: {\"type\":\"error\"}\n\ndata: cut",
		"data: " + strings.Repeat("x", 40) + "\n\n",
	} {
		f.Add(s, []byte{1, 7, 3}, uint8(32))
	}
	f.Fuzz(func(t *testing.T, body string, pieces []byte, limit uint8) {
		lim := int(limit) + 1
		want, wantErr := reference(body, lim)
		got, err := readAll(&pieceReader{s: body, sizes: pieces}, lim)
		if (err != nil) != wantErr || (err != nil && !errors.Is(err, ErrTooLarge)) {
			t.Fatalf("err %v, want too large: %t", err, wantErr)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("events\n got %q\nwant %q", got, want)
		}
	})
}

// pieceReader reads s in pieces of the sizes given, in turn (1 for 0).
type pieceReader struct {
	s     string
	sizes []byte
	n     int
}

func (r *pieceReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	size := len(r.s)
	if len(r.sizes) > 0 {
		size = max(int(r.sizes[r.n%len(r.sizes)]), 1)
		r.n++
	}
	n := copy(p, r.s[:min(size, len(r.s))])
	r.s = r.s[n:]
	return n, nil
}

// reference is the standard's interpretation of a whole body, with
// Reader's limit: the events, and whether a line or data over the limit
// ended the stream.
func reference(body string, limit int) ([]ev, bool) {
	body = strings.TrimPrefix(body, "\xEF\xBB\xBF")
	var out []ev
	var typ, data string
	var hasData bool
	for {
		i := strings.IndexAny(body, "\r\n")
		if i < 0 {
			return out, len(body) > limit // the unfinished last line
		}
		line := body[:i]
		if strings.HasPrefix(body[i:], "\r\n") {
			body = body[i+2:]
		} else {
			body = body[i+1:]
		}
		if len(line) > limit {
			return out, true
		}
		if line == "" {
			if hasData {
				out = append(out, ev{typ, strings.TrimSuffix(data, "\n")})
			}
			typ, data, hasData = "", "", false
			continue
		}
		name, value, found := strings.Cut(line, ":")
		if found && name == "" {
			continue
		}
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "data":
			data, hasData = data+value+"\n", true
			if len(data)-1 > limit {
				return out, true
			}
		case "event":
			typ = value
		}
	}
}
