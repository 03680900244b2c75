package providertest

import (
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
)

// Recorder is an http.RoundTripper that records each request as it went on
// the wire and answers it with a 400 whose body is Answer (the provider's
// invalid-request error), so that a Stream ends at once. The providers'
// body parity tests compare what their own request path sends with what
// their SDK's does.
type Recorder struct {
	// Answer is the body of the 400 every request gets.
	Answer string

	mu   sync.Mutex
	reqs []Recorded
}

// Recorded is one request as it went on the wire.
type Recorded struct {
	Method, URL string
	Header      http.Header
	Body        []byte
}

// RoundTrip records req and answers it with Answer.
func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, Recorded{Method: req.Method, URL: req.URL.String(), Header: req.Header.Clone(), Body: body})
	r.mu.Unlock()
	return &http.Response{
		StatusCode: http.StatusBadRequest, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(r.Answer)), Request: req,
	}, nil
}

// Take returns the requests recorded since the last Take.
func (r *Recorder) Take() []Recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	reqs := r.reqs
	r.reqs = nil
	return reqs
}

// OKTransport answers every request at once with an empty 200 event
// stream, after reading its body: what a send costs without the network.
type OKTransport struct{}

// RoundTrip reads the request's body and answers 200.
func (OKTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, req.Body)
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: http.NoBody, Request: req}, nil
}

// HeldTransport signals each request's arrival on Arrived and answers it
// with a 400 once Release gets a value: SendersStack reads the stacks while
// every sender is held at the deepest of its request path.
type HeldTransport struct{ Arrived, Release chan struct{} }

// NewHeldTransport is a HeldTransport for up to senders requests at once.
func NewHeldTransport(senders int) HeldTransport {
	return HeldTransport{Arrived: make(chan struct{}, senders), Release: make(chan struct{})}
}

// RoundTrip signals the request's arrival and waits for its release.
func (h HeldTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	h.Arrived <- struct{}{}
	<-h.Release
	return &http.Response{StatusCode: http.StatusBadRequest, Header: http.Header{},
		Body: io.NopCloser(strings.NewReader(`{"error":{"message":"held"}}`)), Request: req}, nil
}

// SendersStack runs senders goroutines of their own, each sending one
// request prepared by prepare through a provider whose client is h, reads
// the goroutine stacks in use once every request is held in h — with the
// collector off, so that no stack has been shrunk — and returns the stack
// each sender holds. prepare runs on the benchmark's goroutine and returns
// the send and what to do once it returned (end the attempt).
func SendersStack(b *testing.B, h HeldTransport, senders int, prepare func() (send func() (*http.Response, error), end func())) float64 {
	b.StopTimer()
	runtime.GC()
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	before := stackInuse()
	b.StartTimer()
	type sent struct {
		res *http.Response
		err error
	}
	done := make(chan sent, senders)
	for range senders {
		send, end := prepare()
		defer end()
		go func() {
			res, err := send()
			done <- sent{res, err}
		}()
	}
	for range senders {
		<-h.Arrived
	}
	held := stackInuse()
	for range senders {
		h.Release <- struct{}{}
	}
	for range senders {
		if s := <-done; s.res != nil {
			s.res.Body.Close()
		}
	}
	return float64(held-before) / float64(senders)
}

// stackInuse is the bytes of goroutine stacks in use.
func stackInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.StackInuse
}
