package mock

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// maxBody bounds the request body read: the benchmark's requests are small.
const maxBody = 1 << 20

// maxCached bounds the answers kept rendered: a run asks for a few specs,
// and a caller inventing model names must not grow the server.
const maxCached = 256

// Stats are the server's counters since it started.
type Stats struct {
	// Requests is the number of answers begun (held streams included).
	Requests int64 `json:"requests"`
	// Held is the number of streams held open now.
	Held int64 `json:"held"`
	// Conns is the number of connections accepted: with Requests, how
	// often a client dialled rather than reused a connection.
	Conns int64 `json:"conns"`
}

// Server is the mock upstream; it is an http.Handler. Close ends its held
// streams.
type Server struct {
	requests, held, conns atomic.Int64

	quit     chan struct{}
	quitOnce sync.Once

	mu    sync.Mutex
	cache map[string]*rendered
}

// New returns a Server.
func New() *Server {
	return &Server{quit: make(chan struct{}), cache: map[string]*rendered{}}
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	return Stats{Requests: s.requests.Load(), Held: s.held.Load(), Conns: s.conns.Load()}
}

// Close ends every held stream and every wait between tokens.
func (s *Server) Close() { s.quitOnce.Do(func() { close(s.quit) }) }

// ConnState counts new connections; set it as the http.Server's ConnState.
func (s *Server) ConnState(_ net.Conn, state http.ConnState) {
	if state == http.StateNew {
		s.conns.Add(1)
	}
}

// ServeHTTP routes the two wires and /stats.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case openaiWire.path:
		s.serve(w, r, &openaiWire)
	case anthropicWire.path:
		s.serve(w, r, &anthropicWire)
	case "/stats":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Stats())
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, wr *wire) {
	spec, model, err := readSpec(r)
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(wr.errorBody(err.Error()))
		return
	}
	n := s.requests.Add(1)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set(wr.requestIDHeader, "req_"+strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	if spec.Hold {
		s.hold(r.Context())
		return
	}
	s.stream(r.Context(), w, rc, s.rendered(wr, model, spec.Tokens), spec)
}

// readSpec is the spec the request's model names, and the model.
func readSpec(r *http.Request) (Spec, string, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return Spec{}, "", err
	}
	var req struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return Spec{}, "", err
	}
	spec, err := ParseSpec(req.Model)
	return spec, req.Model, err
}

// hold keeps a stream open, silent, until its client goes away or the
// server closes.
func (s *Server) hold(ctx context.Context) {
	s.held.Add(1)
	defer s.held.Add(-1)
	select {
	case <-ctx.Done():
	case <-s.quit:
	}
}

// stream writes the answer, each frame flushed as the real APIs send them,
// the tokens paced as spec says.
func (s *Server) stream(ctx context.Context, w io.Writer, rc *http.ResponseController, a *rendered, spec Spec) {
	p := pacer{ctx: ctx, quit: s.quit}
	defer p.stop()
	send := func(b []byte) bool {
		_, err := w.Write(b)
		return err == nil && rc.Flush() == nil
	}
	for _, f := range a.head {
		if !send(f) {
			return
		}
	}
	for i := range spec.Tokens {
		d := spec.TokenDelay
		if i == 0 {
			d = spec.FirstToken
		}
		if !p.wait(d) || !send(a.token) {
			return
		}
	}
	for _, f := range a.tail {
		if !send(f) {
			return
		}
	}
}

// rendered is the answer of n tokens from model on wr, rendered once.
func (s *Server) rendered(wr *wire, model string, n int) *rendered {
	key := wr.name + "\x00" + model
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.cache[key]; ok {
		return a
	}
	a := wr.render(model, n)
	if len(s.cache) < maxCached {
		s.cache[key] = &a
	}
	return &a
}

// pacer waits between tokens on one timer, ending early when the client
// goes away or the server closes.
type pacer struct {
	ctx  context.Context
	quit <-chan struct{}
	t    *time.Timer
}

// wait sleeps d; false when the wait ended early.
func (p *pacer) wait(d time.Duration) bool {
	if d <= 0 {
		return p.ctx.Err() == nil
	}
	if p.t == nil {
		p.t = time.NewTimer(d)
	} else {
		p.t.Reset(d)
	}
	select {
	case <-p.t.C:
		return true
	case <-p.ctx.Done():
	case <-p.quit:
	}
	return false
}

func (p *pacer) stop() {
	if p.t != nil {
		p.t.Stop()
	}
}
