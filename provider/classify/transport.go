package classify

import "net/http"

// DefaultIdleConnsPerHost is how many idle connections to its upstream a
// provider keeps for reuse when its configuration says nothing. net/http's
// default of 2 makes a server streaming more than two answers at a time
// dial a new connection (TCP, and TLS in production) for nearly every
// answer once the load goes up, and close one when it ends.
const DefaultIdleConnsPerHost = 256

// NewClient is the HTTP client of a provider that was given none: a
// transport of its own, as http.DefaultTransport is but keeping up to
// idlePerHost idle connections to each host (DefaultIdleConnsPerHost when
// zero or less), with no bound on the number of idle connections in all.
//
// The number of connections in use is not bounded (MaxConnsPerHost 0): over
// HTTP/1.1 every streamed answer holds a connection for as long as it lasts,
// so a bound would queue answers behind each other and turn load into
// first-token timeouts; the service's own limits bound the streams.
func NewClient(idlePerHost int) *http.Client {
	if idlePerHost <= 0 {
		idlePerHost = DefaultIdleConnsPerHost
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = idlePerHost
	t.MaxConnsPerHost = 0
	return &http.Client{Transport: t}
}
