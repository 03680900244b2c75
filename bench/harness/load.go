package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// call is what one completion gave.
type call struct {
	ttft   time.Duration // to the first token
	tokens int
	err    error
}

// caller runs one completion; worker numbers the caller's goroutine.
type caller interface {
	call(ctx context.Context, worker int) call
}

// grpcCaller calls a server's Stream RPC over a pool of connections.
type grpcCaller struct {
	conns   []*grpc.ClientConn
	clients []completionv1.CompletionClient
	req     *completionv1.CompleteRequest
}

// dialServer connects to addr with the channels (gRPC client connections)
// that streams are spread over, perChannel streams each; perChannel 0 puts
// them all on one channel, as a caller with a gRPC library's defaults does.
func dialServer(addr string, streams, perChannel int, req *completionv1.CompleteRequest) (*grpcCaller, error) {
	addrs := make([]string, channels(streams, perChannel))
	for i := range addrs {
		addrs[i] = addr
	}
	return dial(addrs, req)
}

// dial opens a channel to each of addrs; the streams take them in turn
// (worker i the channel i mod len(addrs)), as a load balancer spreading
// them evenly would.
func dial(addrs []string, req *completionv1.CompleteRequest) (*grpcCaller, error) {
	g := &grpcCaller{req: req}
	for _, addr := range addrs {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			g.close()
			return nil, err
		}
		g.conns = append(g.conns, conn)
		g.clients = append(g.clients, completionv1.NewCompletionClient(conn))
	}
	return g, nil
}

// channels is how many channels streams take at perChannel streams each
// (0: one for all).
func channels(streams, perChannel int) int {
	if perChannel <= 0 || streams <= perChannel {
		return 1
	}
	return (streams + perChannel - 1) / perChannel
}

// request is the benchmark's request: one short user message, with a
// resume_grace when grace is positive.
func request(route string, grace time.Duration) *completionv1.CompleteRequest {
	req := &completionv1.CompleteRequest{Route: route, Messages: []*completionv1.Message{{
		Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{{
			Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "Benchmark the relay."}}}}}}}
	if grace > 0 {
		req.ResumeGrace = durationpb.New(grace)
	}
	return req
}

func (g *grpcCaller) close() {
	for _, c := range g.conns {
		_ = c.Close()
	}
}

// withRoute is g asking for another route on the same connections.
func (g *grpcCaller) withRoute(route string) *grpcCaller {
	req := proto.CloneOf(g.req)
	req.Route = route
	return &grpcCaller{conns: g.conns, clients: g.clients, req: req}
}

func (g *grpcCaller) call(ctx context.Context, worker int) call {
	start := time.Now()
	st, err := g.clients[worker%len(g.clients)].Stream(ctx, g.req)
	if err != nil {
		return call{err: err}
	}
	var c call
	completed := false
	for {
		ev, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			c.err = err
			return c
		}
		if ev.GetDelta() != nil {
			if c.tokens == 0 {
				c.ttft = time.Since(start)
			}
			c.tokens++
		}
		if t := ev.GetTransition(); t.GetTerminal() {
			completed = t.GetReason() == completionv1.TransitionReason_TRANSITION_REASON_COMPLETED
		}
	}
	if !completed {
		c.err = errors.New("the stream ended without a terminal COMPLETED")
	}
	return c
}

// directCaller calls the mock with openai-go from the harness: the
// calibration every added time to first token is measured against.
type directCaller struct {
	chat  sdk.ChatCompletionService
	model string
	tr    *http.Transport
}

// newDirect calls baseURL (with /v1) for model; its transport keeps a
// connection per stream, so that the calibration is as lean as a client
// can be.
func newDirect(baseURL, model string, streams int) *directCaller {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = streams, streams
	return &directCaller{model: model, tr: tr, chat: sdk.NewChatCompletionService(
		option.WithBaseURL(baseURL), option.WithHTTPClient(&http.Client{Transport: tr}),
		option.WithMaxRetries(0), option.WithAPIKey("sk-loadbench"))}
}

// close closes the idle connections, which would otherwise stay open in
// the mock for the rest of the run.
func (d *directCaller) close() { d.tr.CloseIdleConnections() }

func (d *directCaller) call(ctx context.Context, _ int) call {
	start := time.Now()
	stream := d.chat.NewStreaming(ctx, sdk.ChatCompletionNewParams{
		Model:         d.model,
		Messages:      []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage("Benchmark the relay.")},
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
	})
	defer stream.Close()
	var c call
	finished := false
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			if ch.Delta.Content != "" {
				if c.tokens == 0 {
					c.ttft = time.Since(start)
				}
				c.tokens++
			}
			finished = finished || ch.FinishReason != ""
		}
	}
	c.err = stream.Err()
	if c.err == nil && !finished {
		c.err = errors.New("the stream ended without a finish_reason")
	}
	return c
}

// load is what a phase's calls gave.
type load struct {
	ttfts    []time.Duration
	calls    int64
	tokens   int64
	errors   int64
	firstErr error
	elapsed  time.Duration
}

// loadSpan says when a load stops beginning calls: at until, or later,
// once minCalls have begun, but not after limit.
type loadSpan struct {
	until    time.Time
	minCalls int64
	limit    time.Time
}

// goesOn reports whether a call may begin now, begun having begun before.
func (s loadSpan) goesOn(now time.Time, begun int64) bool {
	return now.Before(s.until) || (begun < s.minCalls && now.Before(s.limit))
}

// runLoad runs streams workers that call back to back for span; worker i
// starts i/streams of stagger late, so that paced streams do not move in
// step. It returns when every call begun has ended.
func runLoad(ctx context.Context, c caller, streams int, span loadSpan, stagger time.Duration) load {
	start := time.Now()
	results := make([]load, streams)
	var begun atomic.Int64
	var wg sync.WaitGroup
	for w := range streams {
		wg.Go(func() {
			if !sleep(ctx, stagger*time.Duration(w)/time.Duration(streams)) {
				return
			}
			for ctx.Err() == nil && span.goesOn(time.Now(), begun.Add(1)-1) {
				results[w].add(c.call(ctx, w))
			}
		})
	}
	wg.Wait()
	total := load{elapsed: time.Since(start)}
	for _, r := range results {
		total.merge(r)
	}
	return total
}

func (l *load) add(c call) {
	l.calls++
	l.tokens += int64(c.tokens)
	if c.err != nil {
		l.errors++
		if l.firstErr == nil {
			l.firstErr = c.err
		}
		return
	}
	l.ttfts = append(l.ttfts, c.ttft)
}

func (l *load) merge(o load) {
	l.ttfts = append(l.ttfts, o.ttfts...)
	l.calls += o.calls
	l.tokens += o.tokens
	l.errors += o.errors
	if l.firstErr == nil {
		l.firstErr = o.firstErr
	}
}

// hold opens n streams that the upstream holds silent; release ends them
// and returns what they gave: an error for each that ended before release.
func hold(ctx context.Context, c caller, n int) (release func() load) {
	ctx, cancel := context.WithCancel(ctx)
	var released atomic.Bool
	results := make([]call, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			r := c.call(ctx, w)
			if released.Load() {
				r.err = nil // what cancelling it ends it with
			} else {
				r.err = fmt.Errorf("a held stream ended before it was released: %v", r.err)
			}
			results[w] = r
		})
	}
	return func() load {
		released.Store(true)
		cancel()
		wg.Wait()
		var l load
		for _, r := range results {
			l.add(r)
		}
		return l
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
