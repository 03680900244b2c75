package service

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/internal/testcerts"
	"github.com/completiond/completiond/internal/testkit"
)

// testCA is a certificate authority made up for a test.
type testCA struct {
	*testcerts.CA
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	ca, err := testcerts.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{ca}
}

// issue returns a certificate and key, PEM-encoded, for cn: a server
// certificate for localhost, or a client certificate.
func (ca testCA) issue(t *testing.T, cn string, serial int64, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(testcerts.Leaf{CommonName: cn, Serial: serial, Server: server, DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// writeFiles writes the PEM pair to dir/server.{crt,key}, dated at mod.
func writeFiles(t *testing.T, dir string, certPEM, keyPEM []byte, mod time.Time) config.TLSFiles {
	t.Helper()
	f := config.TLSFiles{CertFile: filepath.Join(dir, "server.crt"), KeyFile: filepath.Join(dir, "server.key")}
	for path, b := range map[string][]byte{f.CertFile: certPEM, f.KeyFile: keyPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// tlsServer serves e's server with tc on an in-memory listener and returns
// a dialer of new connections with the given client TLS.
func tlsServer(t *testing.T, e *testEnv, tc *tls.Config) func(client *tls.Config) *grpc.ClientConn {
	t.Helper()
	srv := e.grpc.Completion
	g := NewGRPC(srv, grpc.Creds(credentials.NewTLS(tc)))
	lis := bufconn.Listen(1 << 20)
	go func() { _ = g.Server.Serve(lis) }()
	t.Cleanup(g.Server.Stop)
	return func(client *tls.Config) *grpc.ClientConn {
		conn, err := grpc.NewClient("passthrough:///localhost",
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(credentials.NewTLS(client)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
}

// serverSerial is the serial number of the certificate the server showed.
func serverSerial(t *testing.T, conn *grpc.ClientConn) int64 {
	t.Helper()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		t.Fatal(err)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("auth info %T, want TLS", p.AuthInfo)
	}
	return info.State.PeerCertificates[0].SerialNumber.Int64()
}

// TestCertificateReload: a replaced certificate reaches new connections
// once the reload interval has passed, while a stream on an old connection
// keeps running.
func TestCertificateReload(t *testing.T) {
	ca := newTestCA(t, "test CA")
	dir := t.TempDir()
	base := time.Now().Add(-time.Minute)
	c1, k1 := ca.issue(t, "server", 101, true)
	files := writeFiles(t, dir, c1, k1, base)
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	tc, err := ServerTLS(files, nil, now, telemetry.Telemetry{})
	if err != nil {
		t.Fatal(err)
	}
	e, _, hold := holdEnv(t, func(*config.Limits) {})
	dial := tlsServer(t, e, tc)
	client := &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}

	first := dial(client)
	if got := serverSerial(t, first); got != 101 {
		t.Fatalf("serial %d, want 101", got)
	}
	e.client = completionv1.NewCompletionClient(first)
	finish := held(t, e, hold, "ops-secret-key")

	c2, k2 := ca.issue(t, "server", 102, true)
	writeFiles(t, dir, c2, k2, base.Add(time.Second))
	if got := serverSerial(t, dial(client)); got != 101 {
		t.Errorf("serial %d before the reload interval passed, want 101 still", got)
	}
	skew.Store(int64(config.DefaultTLSReload))
	if got := serverSerial(t, dial(client)); got != 102 {
		t.Errorf("serial %d after the files changed, want 102", got)
	}
	finish() // the stream on the first connection ends OK

	// A broken file keeps the last good certificate.
	writeFiles(t, dir, []byte("not a certificate"), k2, base.Add(2*time.Second))
	skew.Store(int64(2 * config.DefaultTLSReload))
	if got := serverSerial(t, dial(client)); got != 102 {
		t.Errorf("serial %d after a broken file, want 102 still", got)
	}
}

func TestServerTLSRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "test CA")
	c, k := ca.issue(t, "server", 7, true)
	good := writeFiles(t, dir, c, k, time.Now())
	notPEM := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(notPEM, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		files config.TLSFiles
	}{
		{"no key", config.TLSFiles{CertFile: good.CertFile}},
		{"missing file", config.TLSFiles{CertFile: filepath.Join(dir, "nope"), KeyFile: good.KeyFile}},
		{"key is not PEM", config.TLSFiles{CertFile: good.CertFile, KeyFile: notPEM}},
		{"client CA is not PEM", config.TLSFiles{CertFile: good.CertFile, KeyFile: good.KeyFile, ClientCAFile: notPEM}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ServerTLS(tc.files, nil, nil, telemetry.Telemetry{}); err == nil {
				t.Error("ServerTLS accepted bad files")
			}
		})
	}
}

// TestClientCertificates: with a client CA, a verified client certificate
// authenticates its caller as the key its CommonName names; a caller with
// neither a certificate nor a key is refused, except by health; a
// certificate from another CA fails the handshake.
func TestClientCertificates(t *testing.T) {
	ca, other := newTestCA(t, "test CA"), newTestCA(t, "other CA")
	dir := t.TempDir()
	c, k := ca.issue(t, "server", 1, true)
	files := writeFiles(t, dir, c, k, time.Now())
	files.ClientCAFile = filepath.Join(dir, "clients.pem")
	if err := os.WriteFile(files.ClientCAFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tc, err := ServerTLS(files, nil, nil, telemetry.Telemetry{})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := authEnv(t, func(c *Config) { c.Auth.ClientCertificates = true })
	dial := tlsServer(t, e, tc)
	clientCert := func(ca testCA, cn string) []tls.Certificate {
		cp, kp := ca.issue(t, cn, 9, false)
		pair, err := tls.X509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{pair}
	}
	for _, tc := range []struct {
		name   string
		certs  []tls.Certificate
		route  string
		want   codes.Code
		health bool
	}{
		{"no certificate", nil, "", codes.Unauthenticated, true},
		{"certificate naming a key", clientCert(ca, "narrow"), "sim", codes.OK, true},
		{"route its key may not use", clientCert(ca, "narrow"), "sim-large", codes.PermissionDenied, true},
		{"certificate naming no key: every route", clientCert(ca, "billing"), "sim-large", codes.OK, true},
		{"certificate of another CA", clientCert(other, "narrow"), "sim", codes.Unavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Sent whatever CAs the server asks for: a client picks by them.
			conn := dial(&tls.Config{RootCAs: ca.Pool, ServerName: "localhost",
				GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
					if len(tc.certs) == 0 {
						return &tls.Certificate{}, nil
					}
					return &tc.certs[0], nil
				}})
			req := prompt("hi", nil)
			req.Route = tc.route
			before := e.upstream.calls.Load()
			_, err := completionv1.NewCompletionClient(conn).Complete(t.Context(), req)
			if status.Code(err) != tc.want {
				t.Errorf("Complete: %v, want %v", err, tc.want)
			}
			if tc.want != codes.OK && e.upstream.calls.Load() != before {
				t.Error("a refused call reached the upstream")
			}
			_, err = healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
			if (err == nil) != tc.health {
				t.Errorf("health: %v", err)
			}
		})
	}
}

// selfSignedPEM is a certificate for localhost signed by its own key,
// valid for a year, and the key, PEM-encoded.
func selfSignedPEM(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// TestCertificateWarnings: a server started or reloaded with a certificate
// clients will refuse says so — expired, not valid yet, self-signed, about
// to expire — and serves the expiry of the one it serves as a gauge.
func TestCertificateWarnings(t *testing.T) {
	ca := newTestCA(t, "test CA")
	issued, issuedKey := ca.issue(t, "server", 3, true) // valid for a day: within CertExpiryWarning
	self, selfKey := selfSignedPEM(t)
	for _, tc := range []struct {
		name      string
		cert, key []byte
		skew      time.Duration
		want      []string
	}{
		{"about to expire", issued, issuedKey, 0, []string{"tls certificate expires soon"}},
		{"expired", issued, issuedKey, 48 * time.Hour, []string{"tls certificate expired: clients will refuse it"}},
		{"not valid yet", issued, issuedKey, -3 * time.Hour, []string{"tls certificate not valid yet: clients will refuse it"}},
		{"self-signed", self, selfKey, 0, []string{"tls certificate is self-signed: only clients given it will trust it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log testkit.SyncBuffer
			files := writeFiles(t, t.TempDir(), tc.cert, tc.key, time.Now())
			now := func() time.Time { return time.Now().Add(tc.skew) }
			if _, err := ServerTLS(files, slog.New(slog.NewJSONHandler(&log, nil)), now, telemetry.Telemetry{}); err != nil {
				t.Fatal(err)
			}
			var said []string
			for _, l := range testkit.LogLines(t, log.String()) {
				said = append(said, l["msg"].(string))
			}
			if !slices.Equal(said, tc.want) {
				t.Errorf("logged %q, want %q", said, tc.want)
			}
		})
	}
}

// TestCertificateExpiryGauge: completiond.tls.certificate.expiry is the
// expiry of the certificate served, the reloaded one after a reload, which
// warns as a start does.
func TestCertificateExpiryGauge(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(t.Context()) })
	expiry := func() int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		return counters(rm)["completiond.tls.certificate.expiry{}"]
	}
	dir := t.TempDir()
	self, selfKey := selfSignedPEM(t)
	files := writeFiles(t, dir, self, selfKey, time.Now().Add(-time.Minute))
	var log testkit.SyncBuffer
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	tc, err := ServerTLS(files, slog.New(slog.NewJSONHandler(&log, nil)), now, telemetry.Telemetry{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := expiry(), leafOf(t, self).NotAfter.Unix(); got != want {
		t.Errorf("expiry gauge %d, want the self-signed certificate's %d", got, want)
	}
	ca := newTestCA(t, "test CA")
	issued, issuedKey := ca.issue(t, "server", 4, true)
	writeFiles(t, dir, issued, issuedKey, time.Now())
	skew.Store(int64(48 * time.Hour)) // past the reload interval, and past the new certificate's expiry
	if _, err := tc.GetCertificate(&tls.ClientHelloInfo{}); err != nil {
		t.Fatal(err)
	}
	if got, want := expiry(), leafOf(t, issued).NotAfter.Unix(); got != want {
		t.Errorf("expiry gauge after the reload %d, want the new certificate's %d", got, want)
	}
	var said []string
	for _, l := range testkit.LogLines(t, log.String()) {
		said = append(said, l["msg"].(string))
	}
	if !slices.Contains(said, "tls certificate expired: clients will refuse it") {
		t.Errorf("the reload of an expired certificate logged %q, no warning", said)
	}
}

// leafOf parses the first certificate of certPEM.
func leafOf(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
