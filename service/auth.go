package service

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"slices"
	"strings"

	"github.com/completiond/completiond/config"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	middleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
)

// Caller is who made a request, once authenticated.
type Caller struct {
	// Name is the name of the key or client certificate.
	Name string
	// Routes are the routes the caller may use; nil means every route.
	Routes []string
	// Budget bounds what the caller's key spends per period; nil is none.
	Budget *config.Budget
}

// may reports whether the caller may use route.
func (c Caller) may(route string) bool { return c.Routes == nil || slices.Contains(c.Routes, route) }

// authOutcome is what identify found out about a call's caller: who it is,
// or the error its call ends with.
type authOutcome struct {
	caller *Caller
	err    error
}

type authOutcomeKey struct{}

// callerFrom returns the authenticated caller of ctx, if any.
func callerFrom(ctx context.Context) (Caller, bool) {
	o, ok := ctx.Value(authOutcomeKey{}).(*authOutcome)
	if !ok || o.caller == nil {
		return Caller{}, false
	}
	return *o.caller, true
}

// CallerName returns the name of the key or client certificate the call of
// ctx authenticated with, or "" when it did not.
func CallerName(ctx context.Context) string {
	c, _ := callerFrom(ctx)
	return c.Name
}

// authenticator checks the credentials of each call. It runs in two parts:
// identify, first in the interceptor chain, finds out who calls without
// refusing anything, so that the log line of a call carries the key's name;
// enforce, after logging, refuses calls that did not authenticate.
type authenticator struct {
	auth config.Auth
}

// healthPrefix is the method prefix of grpc.health.v1, which stays open.
const healthPrefix = "/grpc.health.v1.Health/"

// identify returns ctx carrying who the caller is, or why it is not anybody.
func (a *authenticator) identify(ctx context.Context) context.Context {
	if !a.auth.On() {
		return ctx
	}
	if _, ok := ctx.Value(authOutcomeKey{}).(*authOutcome); ok {
		return ctx // the door (door.go) identified the caller already
	}
	c, err := a.authenticate(ctx)
	return context.WithValue(ctx, authOutcomeKey{}, &authOutcome{caller: c, err: err})
}

// authenticate checks the bearer key of ctx, or else its verified client
// certificate. A key is compared by its SHA-256 digest in constant time, and
// every configured key is compared.
func (a *authenticator) authenticate(ctx context.Context) (*Caller, error) {
	if vals := metadata.ValueFromIncomingContext(ctx, "authorization"); len(vals) > 1 {
		return nil, duplicateAuthStatus()
	} else if len(vals) == 1 {
		token, err := auth.AuthFromMD(ctx, "bearer")
		if err != nil {
			return nil, malformedAuthStatus()
		}
		sum := config.HashKey(token)
		var found *config.APIKey
		for i := range a.auth.Keys {
			k := &a.auth.Keys[i]
			if subtle.ConstantTimeCompare(sum[:], k.SHA256[:]) == 1 && k.SHA256 != ([sha256.Size]byte{}) {
				found = k
			}
		}
		if found == nil {
			return nil, unknownKeyStatus()
		}
		return &Caller{Name: found.Name, Routes: found.Routes, Budget: found.Budget}, nil
	}
	if a.auth.ClientCertificates {
		if cert := verifiedClientCert(ctx); cert != nil {
			return a.certCaller(cert), nil
		}
		return nil, missingCredentialsStatus(true)
	}
	return nil, missingCredentialsStatus(false)
}

// verifiedClientCert is the leaf of the client certificate chain the TLS
// handshake of ctx's connection verified, or nil.
func verifiedClientCert(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}

// certCaller maps a verified client certificate to a caller: the key named
// by its CommonName or one of its DNS SANs, else its CommonName with every
// route.
func (a *authenticator) certCaller(cert *x509.Certificate) *Caller {
	names := append([]string{cert.Subject.CommonName}, cert.DNSNames...)
	for _, k := range a.auth.Keys {
		if slices.Contains(names, k.Name) {
			return &Caller{Name: k.Name, Routes: k.Routes, Budget: k.Budget}
		}
	}
	name := cert.Subject.CommonName
	if name == "" && len(cert.DNSNames) > 0 {
		name = cert.DNSNames[0]
	}
	return &Caller{Name: name}
}

// enforce is the go-grpc-middleware auth function: it refuses a call whose
// caller did not authenticate, except the health service's.
func (a *authenticator) enforce(ctx context.Context) (context.Context, error) {
	if !a.auth.On() {
		return ctx, nil
	}
	if m, _ := grpc.Method(ctx); strings.HasPrefix(m, healthPrefix) {
		return ctx, nil
	}
	o, ok := ctx.Value(authOutcomeKey{}).(*authOutcome)
	if !ok {
		return nil, unidentifiedStatus()
	}
	if o.err != nil {
		return nil, o.err
	}
	return ctx, nil
}

// interceptors returns the identify and enforce interceptors, unary and
// stream: identify goes first in the chain, enforce after logging.
func (a *authenticator) interceptors() (identify grpc.UnaryServerInterceptor, identifyStream grpc.StreamServerInterceptor,
	enforce grpc.UnaryServerInterceptor, enforceStream grpc.StreamServerInterceptor) {
	identify = func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(a.identify(ctx), req)
	}
	identifyStream = func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if !a.auth.On() {
			return h(srv, ss)
		}
		w := middleware.WrapServerStream(ss)
		w.WrappedContext = a.identify(ss.Context())
		return h(srv, w)
	}
	return identify, identifyStream, auth.UnaryServerInterceptor(a.enforce), auth.StreamServerInterceptor(a.enforce)
}

// permit applies the caller's allowed routes to a request's chain of
// routes: its route (or the default one) and every fallback it names in
// fallback_routes must be allowed, or the request is refused with
// PERMISSION_DENIED; fallbacks that come from the route's configured chain
// and are not allowed are dropped.
func permit(ctx context.Context, fallbacks []string, chain []*config.Route) ([]*config.Route, error) {
	c, ok := callerFrom(ctx)
	if !ok || c.Routes == nil || len(chain) == 0 {
		return chain, nil
	}
	if r := chain[0].Spec.Name; !c.may(r) {
		return nil, routeDeniedStatus(c, r)
	}
	for _, fb := range fallbacks {
		if !c.may(fb) {
			return nil, routeDeniedStatus(c, fb)
		}
	}
	out := make([]*config.Route, 0, len(chain))
	for _, r := range chain {
		if c.may(r.Spec.Name) {
			out = append(out, r)
		}
	}
	return out, nil
}
