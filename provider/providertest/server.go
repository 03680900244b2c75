package providertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// maxHold bounds every wait for a client to go away, so that a client that
// never does fails its test instead of hanging it.
const maxHold = 10 * time.Second

// Server is a loopback fault server speaking one provider's wire.
type Server struct {
	// URL is the base URL to give the provider: http://127.0.0.1:port for
	// Anthropic, http://127.0.0.1:port/v1 for OpenAI.
	URL string

	wire   wire
	script Script
	srv    *httptest.Server
	quit   chan struct{}
	conns  atomic.Int64 // connections accepted
	// closes are the connections closed so far, in order.
	closesMu sync.Mutex
	closes   []Close

	mu    sync.Mutex
	reqs  []*Request
	first time.Time

	cache promptCache // the provider's prompt cache, as the server models it
}

// Request is one request the server saw.
type Request struct {
	// N is its number, from 1.
	N int
	// Time is when it arrived.
	Time time.Time
	// Path is its URL path.
	Path string
	// Header and Body are what the client sent.
	Header http.Header
	Body   []byte

	wire     wire // the server's, to read Body with
	gone     chan struct{}
	goneOnce sync.Once
}

// NewAnthropic starts a server speaking Anthropic's Messages API; it stops
// when t ends.
func NewAnthropic(t testing.TB, script Script) *Server {
	return start(t, anthropicWire{}, script, "")
}

// NewOpenAI starts a server speaking the Chat Completions API; it stops when
// t ends.
func NewOpenAI(t testing.TB, script Script) *Server {
	return start(t, openaiWire{}, script, "/v1")
}

func start(t testing.TB, w wire, script Script, basePath string) *Server {
	t.Helper()
	s := &Server{wire: w, script: script, quit: make(chan struct{})}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	var infos sync.Map // net.Conn → *connInfo
	s.srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		info := &connInfo{}
		infos.Store(c, info)
		return context.WithValue(ctx, connInfoKey{}, info)
	}
	s.srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.conns.Add(1)
		case http.StateClosed:
			if v, ok := infos.LoadAndDelete(c); ok {
				s.closed(v.(*connInfo))
			}
		}
	}
	s.srv.Start()
	s.URL = s.srv.URL + basePath
	t.Cleanup(func() {
		// Waits end first, so that Close, which waits for the handlers, returns.
		close(s.quit)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

// Client is an HTTP client for the server; its idle connections are closed
// with the server.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// Body posts a request to the server's endpoint and returns the body it
// answers, byte for byte as it streamed it (the next reply of the script):
// a wire-faithful rendering to replay, in a benchmark or a fuzz seed.
func (s *Server) Body(t testing.TB) string {
	t.Helper()
	resp, err := s.Client().Post(s.srv.URL+s.wire.path(), "application/json",
		strings.NewReader(`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatalf("providertest: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("providertest: %v", err)
	}
	return string(b)
}

// Conns is the number of connections the server accepted so far: a client
// that reuses its connections opens fewer than it makes requests.
func (s *Server) Conns() int { return int(s.conns.Load()) }

// Close is one connection closed: until t ends the server closes none of its
// own (no timeouts, every response whole), so each is a connection its
// client gave up rather than kept for its next request.
type Close struct {
	// Requests is the number of requests the connection carried.
	Requests int
	// AfterRequest is how long after the arrival of its last request the
	// server saw it closed; 0 when it carried none.
	AfterRequest time.Duration
}

// Closes are the connections closed so far.
func (s *Server) Closes() []Close {
	s.closesMu.Lock()
	defer s.closesMu.Unlock()
	return append([]Close(nil), s.closes...)
}

// connInfo is what the server knows of one connection.
type connInfo struct {
	mu       sync.Mutex
	requests int
	last     time.Time // when its last request arrived
}

// connInfoKey is the request context's key of its connection's connInfo.
type connInfoKey struct{}

// closed records the close of the connection info describes.
func (s *Server) closed(info *connInfo) {
	info.mu.Lock()
	c := Close{Requests: info.requests}
	if c.Requests > 0 {
		c.AfterRequest = time.Since(info.last)
	}
	info.mu.Unlock()
	s.closesMu.Lock()
	s.closes = append(s.closes, c)
	s.closesMu.Unlock()
}

// Requests is every request seen so far, in order.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.reqs...)
}

// Count is the number of requests seen so far.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// Request is the nth request (from 1); it fails t if there is none.
func (s *Server) Request(t testing.TB, n int) *Request {
	t.Helper()
	reqs := s.Requests()
	if n < 1 || n > len(reqs) {
		t.Fatalf("providertest: request %d asked for, %d seen", n, len(reqs))
	}
	return reqs[n-1]
}

// Gone is closed when the client went away while its request was being
// answered (it closed or reset the connection, or its context ended).
func (r *Request) Gone() <-chan struct{} { return r.gone }

// WaitGone fails t unless the client of r goes away within d.
func (r *Request) WaitGone(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case <-r.gone:
	case <-time.After(d):
		t.Fatalf("providertest: the client of request %d did not go away within %v", r.N, d)
	}
}

// JSON decodes the body; it fails t if the body is not a JSON object.
func (r *Request) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("providertest: request %d body is not JSON: %v", r.N, err)
	}
	return m
}

func (r *Request) markGone() { r.goneOnce.Do(func() { close(r.gone) }) }

// record keeps the request and reads its whole body, so that a reset comes
// after the client finished sending.
func (s *Server) record(hr *http.Request) (*Request, time.Duration) {
	body, _ := io.ReadAll(hr.Body)
	now := time.Now()
	if info, ok := hr.Context().Value(connInfoKey{}).(*connInfo); ok {
		info.mu.Lock()
		info.requests++
		info.last = now
		info.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first.IsZero() {
		s.first = now
	}
	r := &Request{N: len(s.reqs) + 1, Time: now, Path: hr.URL.Path, Header: hr.Header.Clone(), Body: body, wire: s.wire, gone: make(chan struct{})}
	s.reqs = append(s.reqs, r)
	return r, now.Sub(s.first)
}

func (s *Server) serve(w http.ResponseWriter, hr *http.Request) {
	rec, since := s.record(hr)
	reply := s.script(rec.N, since)
	x := &exchange{s: s, w: w, hr: hr, rec: rec, reply: reply}
	if hr.Method != http.MethodPost || hr.URL.Path != s.wire.path() {
		x.writeError(s.wire.notFound(hr.URL.Path))
		return
	}
	if e := s.wire.refuse(rec.Body); e != nil {
		x.writeError(*e)
		return
	}
	if reply.Media != (MediaRule{}) {
		if e := s.wire.rejectMedia(rec.Body, reply.Media); e != nil {
			x.writeError(*e)
			return
		}
	}
	x.reply.Answer = s.wire.answer(reply.Answer, rec.Body)
	if !x.wait(reply.HeadersDelay) {
		return
	}
	switch reply.Fault {
	case ResetBeforeHeaders:
		x.reset()
		return
	case HangBeforeHeaders:
		x.hold()
		return
	}
	if reply.Body != "" {
		x.writeRaw()
		return
	}
	if reply.SSE != "" {
		x.headers("text/event-stream; charset=utf-8", nil)
		x.w.WriteHeader(http.StatusOK)
		if x.write(reply.SSE) && (reply.Fault == Stall || reply.Fault == OmitEndHold) {
			x.hold()
		}
		return
	}
	if e := x.apiError(); e != nil && reply.Fault != ErrorEvent {
		x.writeError(*e)
		return
	}
	x.stream()
}

// exchange is the answer to one request under way.
type exchange struct {
	s     *Server
	w     http.ResponseWriter
	hr    *http.Request
	rec   *Request
	reply Reply
}

// apiError is the reply's error, if it has one.
func (x *exchange) apiError() *APIError {
	if x.reply.Error != nil {
		return x.reply.Error
	}
	if x.reply.Cond != 0 {
		e := x.s.wire.condition(x.reply.Cond)
		return &e
	}
	return nil
}

// headers sets the headers every response has, then the reply's.
func (x *exchange) headers(contentType string, extra map[string]string) {
	h := x.w.Header()
	h.Set("Content-Type", contentType)
	h.Set(x.s.wire.requestIDHeader(), fmt.Sprintf("req_test_%04d", x.rec.N))
	for k, v := range extra {
		h.Set(k, v)
	}
	for k, v := range x.reply.Header {
		h.Set(k, v)
	}
}

func (x *exchange) writeRaw() {
	x.headers("application/json", nil)
	status := x.reply.Status
	if status == 0 {
		status = http.StatusOK
	}
	x.w.WriteHeader(status)
	_, _ = io.WriteString(x.w, x.reply.Body)
}

func (x *exchange) writeError(e APIError) {
	x.headers("application/json", e.Header)
	status := e.Status
	if x.reply.Status != 0 {
		status = x.reply.Status
	}
	x.w.WriteHeader(status)
	_, _ = x.w.Write(x.s.wire.errorBody(e, x.rec.N))
}

// wait sleeps d; false when the client went away or the test ended first.
func (x *exchange) wait(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-x.hr.Context().Done():
		x.rec.markGone()
	case <-x.s.quit:
	}
	return false
}

// hold waits for the client to go away (bounded by maxHold).
func (x *exchange) hold() { x.wait(maxHold) }

// reset closes the connection with a TCP RST.
func (x *exchange) reset() {
	conn, _, err := http.NewResponseController(x.w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// write sends bytes at once; false when the client is gone.
func (x *exchange) write(b string) bool {
	if _, err := io.WriteString(x.w, b); err != nil {
		x.rec.markGone()
		return false
	}
	if err := http.NewResponseController(x.w).Flush(); err != nil {
		x.rec.markGone()
		return false
	}
	return true
}

// stream sends the reply's answer, broken as its fault says.
func (x *exchange) stream() {
	x.headers("text/event-stream; charset=utf-8", nil)
	x.w.WriteHeader(http.StatusOK)
	if !x.write("") {
		return
	}
	// The model reads the prompt before its first token: the prompt
	// cache is looked up and written now, whatever happens to the stream.
	if a := &x.reply.Answer; a.Usage.CountPrompt {
		u := x.s.wire.countPrompt(&x.s.cache, x.rec.Body)
		a.Usage.Input, a.Usage.CacheRead, a.Usage.CacheWrite = u.Input, u.CacheRead, u.CacheWrite
	}
	frames := x.s.wire.frames(x.reply.Answer, x.rec.N)
	tokens := 0
	for _, f := range frames {
		if f.end && (x.reply.Fault == OmitEnd || x.reply.Fault == OmitEndHold) {
			if x.reply.Fault == OmitEndHold {
				x.hold()
			}
			return
		}
		if x.breaksAt(f, tokens) {
			x.breakStream()
			return
		}
		if f.token && !x.pace(tokens) {
			return
		}
		if f.end && !x.wait(x.reply.TailDelay) {
			return
		}
		if !x.write(f.data) {
			return
		}
		if f.token {
			tokens++
		}
	}
	x.wait(x.reply.TailDelay)
}

// breaksAt reports whether a mid-stream fault strikes before frame f: at the
// token after the first After, or at the first tail frame if the answer is
// shorter.
func (x *exchange) breaksAt(f frame, tokens int) bool {
	switch x.reply.Fault {
	case Cut, ResetMidStream, Stall, Malformed, ErrorEvent:
		return (f.token && tokens >= x.reply.After) || f.tail
	}
	return false
}

// pace waits before a token: FirstTokenDelay before the first, TokenDelay
// before the others.
func (x *exchange) pace(tokens int) bool {
	if tokens == 0 {
		return x.wait(x.reply.FirstTokenDelay)
	}
	return x.wait(x.reply.TokenDelay)
}

func (x *exchange) breakStream() {
	switch x.reply.Fault {
	case ResetMidStream:
		x.reset()
	case Stall:
		x.hold()
	case Malformed:
		if x.write(x.s.wire.malformed()) {
			x.hold() // the client must stop on its own
		}
	case ErrorEvent:
		if e := x.apiError(); e != nil {
			x.write(x.s.wire.errorEvent(*e))
		}
	}
	// Cut: returning ends the body cleanly.
}

// RefusedURL is an http URL on which nothing listens: a connection to it is
// refused.
func RefusedURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("providertest: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr
}
