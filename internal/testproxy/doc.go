// Package testproxy is a loopback TCP proxy for tests that need a real
// connection to break: put it between a client and a server, and Cut
// closes every connection through it abruptly (a TCP reset on both sides,
// as a dropped network or a crashed peer would), while it keeps listening,
// so that the client's reconnect goes through.
//
//	p := testproxy.New(t, serverAddr)
//	conn, _ := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
//	… start a stream, receive some events …
//	p.Cut()  // the stream fails on both sides; the next call reconnects
//
// A proxy is bounded: at most MaxConns connections at once (more are
// closed as they arrive), and it stops by itself when the test that made
// it ends, closing its listener and every connection and waiting for its
// goroutines, so that goleak finds none of them.
package testproxy
