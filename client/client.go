package client

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// Client calls completiond. It is safe for concurrent use.
type Client struct {
	rpc       completionv1.CompletionClient
	conns     []*grpc.ClientConn // opened by Connect, closed by Close
	reconnect Reconnect
}

// Option configures a Client.
type Option func(*Client)

// WithReconnect sets how a stream with a resume grace attaches again after
// its connection dropped (default: [DefaultReconnect]).
func WithReconnect(r Reconnect) Option { return func(c *Client) { c.reconnect = r } }

// New returns a Client that calls completiond over conn.
func New(conn grpc.ClientConnInterface, opts ...Option) *Client {
	c := &Client{rpc: completionv1.NewCompletionClient(conn), reconnect: DefaultReconnect()}
	for _, o := range opts {
		o(c)
	}
	return c
}

// ConnectOptions say how Connect reaches the server.
type ConnectOptions struct {
	// APIKey, when set, is sent as "authorization: Bearer <key>" on every
	// call. Over a connection without TLS only to a loopback address.
	APIKey string
	// TLS, when set, secures the connection; nil connects in plain text.
	TLS *tls.Config
	// Connections is how many connections (gRPC channels, each its own
	// HTTP/2 connection) to open to target; each call starts on the next
	// one in turn. 0 or 1: one, which carries thousands of streams on the
	// server's defaults. More spread the streams when the server's
	// --max-streams-per-conn was set below what this client runs at once
	// (past it, a connection's streams wait in the client, silently), and
	// over several replicas behind a TCP load balancer.
	Connections int
}

// Connect returns a Client with its own connections to target
// (host:port), which Close closes.
func Connect(target string, o ConnectOptions, opts ...Option) (*Client, error) {
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.APIKey != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{key: o.APIKey, secure: o.TLS != nil}))
	}
	conns := make([]*grpc.ClientConn, 0, max(o.Connections, 1))
	for range cap(conns) {
		// Each grpc-go ClientConn dials its own connection: none is
		// shared between them.
		conn, err := grpc.NewClient(target, dial...)
		if err != nil {
			for _, c := range conns {
				_ = c.Close()
			}
			return nil, err
		}
		conns = append(conns, conn)
	}
	var cc grpc.ClientConnInterface = conns[0]
	if len(conns) > 1 {
		cc = &spread{conns: conns}
	}
	c := New(cc, opts...)
	c.conns = conns
	return c, nil
}

// Close closes the connections Connect opened; it does nothing for a
// Client made by New.
func (c *Client) Close() error {
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}

// spread starts each call on the next of its connections.
type spread struct {
	conns []*grpc.ClientConn
	next  atomic.Uint64
}

func (s *spread) pick() *grpc.ClientConn {
	return s.conns[(s.next.Add(1)-1)%uint64(len(s.conns))]
}

// Invoke runs a unary call on the next connection.
func (s *spread) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return s.pick().Invoke(ctx, method, args, reply, opts...)
}

// NewStream starts a stream on the next connection.
func (s *spread) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return s.pick().NewStream(ctx, desc, method, opts...)
}

// bearer sends the API key. grpc-go refuses to send credentials that
// require transport security over plain text; without TLS the key is meant
// for a loopback server, which the server itself insists on.
type bearer struct {
	key    string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.key}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }

// Complete runs one completion and returns its aggregated answer, or an
// *Error.
//
// The request is sent with an idempotency key (a random one unless req
// has its own): a Complete sent again with the same key and request, by
// the caller, waits for the first one's result instead of starting
// another completion.
func (c *Client) Complete(ctx context.Context, req *completionv1.CompleteRequest, opts ...grpc.CallOption) (*completionv1.CompleteResponse, error) {
	resp, err := c.rpc.Complete(ctx, withIdempotencyKey(req), opts...)
	if err != nil {
		e := AsError(err)
		e.CompletionID = resp.GetCompletionId()
		return nil, e
	}
	return resp, nil
}

// Stream starts a completion. Read its events with Recv (or Events) until
// io.EOF; the stream's Fold holds the answer as it grows.
//
// The request is sent with an idempotency key (a random one unless req
// has its own), so that a start whose connection dropped before its
// started event is sent again, within Reconnect.Window, without starting
// a second completion: the server attaches the retry to the first one
// if it began.
func (c *Client) Stream(ctx context.Context, req *completionv1.CompleteRequest, opts ...grpc.CallOption) (*Stream, error) {
	req = withIdempotencyKey(req)
	rpc, err := c.rpc.Stream(ctx, req, opts...)
	if err != nil {
		return nil, AsError(err)
	}
	s := &Stream{c: c, ctx: ctx, rpc: rpc, opts: opts, grace: req.GetResumeGrace().AsDuration(), start: req}
	return s, nil
}

// Attach follows a running or recently ended completion from after its
// event afterSeq to its result, as a Stream (which attaches again by
// itself if the connection drops).
func (c *Client) Attach(ctx context.Context, completionID string, afterSeq uint64, opts ...grpc.CallOption) (*Stream, error) {
	s := &Stream{c: c, ctx: ctx, opts: opts, attachOnly: true}
	s.fold.completionID, s.fold.lastSeq = completionID, afterSeq
	rpc, err := c.rpc.Attach(ctx, &completionv1.AttachRequest{CompletionId: completionID, AfterSeq: afterSeq}, opts...)
	if err != nil {
		return nil, AsError(err)
	}
	s.rpc = rpc
	return s, nil
}

// Cancel ends the running completion completionID as its caller's own
// cancel would (ABORTED_STREAMING, or ABORTED_TOOLS while a Session
// awaits its caller), from any connection — in a fleet, through any
// replica — and returns how it ended once the end is in the server's
// log. A completion that had ended is answered as it ended, AlreadyEnded
// set. Errors are *Error: NOT_FOUND (COMPLETION_NOT_FOUND) for an unknown
// or expired id and for another key's completion alike, UNAVAILABLE
// (CANCEL_PENDING) when the end did not come within the server's wait —
// the cancel stands, and Cancel again waits again.
func (c *Client) Cancel(ctx context.Context, completionID string, opts ...grpc.CallOption) (*completionv1.CancelResponse, error) {
	resp, err := c.rpc.Cancel(ctx, &completionv1.CancelRequest{CompletionId: completionID}, opts...)
	if err != nil {
		e := AsError(err)
		e.CompletionID = completionID
		return nil, e
	}
	return resp, nil
}

// ListRoutes returns the routes the client's key may use (every route
// when the server runs without authentication), sorted by name: each
// with its model, limits, fallbacks, capabilities (what the server's
// request validation checks against), whether it is the default route
// and whether its circuit is open now. Errors are *Error.
func (c *Client) ListRoutes(ctx context.Context, opts ...grpc.CallOption) ([]*completionv1.RouteInfo, error) {
	resp, err := c.rpc.ListRoutes(ctx, &completionv1.ListRoutesRequest{}, opts...)
	if err != nil {
		return nil, AsError(err)
	}
	return resp.GetRoutes(), nil
}

// errNoResult is a stream that ended OK without a result, which the
// server never does; it is reported rather than taken for an answer.
var errNoResult = status.Error(codes.Internal, "the stream ended without a result")

// failure types err and adds what the stream knows.
func failure(err error, f *Fold) *Error {
	if errors.Is(err, io.EOF) {
		err = errNoResult
	}
	e := AsError(err)
	e.CompletionID, e.Result = f.CompletionID(), f.Result()
	return e
}
