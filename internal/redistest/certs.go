package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"

	"github.com/completiond/completiond/internal/testcerts"
)

// certificates are the files of a fresh certificate authority (ca), of a
// server certificate for 127.0.0.1 it signed (cert, key), and of a client
// certificate it signed (clientCert, clientKey: a node's, towards the
// others of its cluster, which check it), and a pool that trusts the
// authority.
type certificates struct {
	ca, cert, key         string
	clientCert, clientKey string
	pool                  *x509.CertPool
}

// newCertificates writes certificates into dir: ca.pem, server.pem,
// server-key.pem, client.pem and client-key.pem.
func newCertificates(dir string) (*certificates, error) {
	authority, err := testcerts.NewCA("redistest CA")
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := authority.Issue(testcerts.Leaf{CommonName: "127.0.0.1", Serial: 2, Server: true,
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return nil, err
	}
	clientPEM, clientKeyPEM, err := authority.Issue(testcerts.Leaf{CommonName: "redistest node", Serial: 3})
	if err != nil {
		return nil, err
	}
	c := &certificates{ca: filepath.Join(dir, "ca.pem"), cert: filepath.Join(dir, "server.pem"),
		key: filepath.Join(dir, "server-key.pem"), clientCert: filepath.Join(dir, "client.pem"),
		clientKey: filepath.Join(dir, "client-key.pem"), pool: authority.Pool}
	for path, b := range map[string][]byte{c.ca: authority.PEM, c.cert: certPEM, c.key: keyPEM,
		c.clientCert: clientPEM, c.clientKey: clientKeyPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// serve makes s speak TLS only, with the server certificate (its clients
// need none of their own; its peers in a cluster show the client one),
// and be reached over TLS.
func (c *certificates) serve(s *Server) {
	s.CAFile, s.tls = c.ca, &tls.Config{RootCAs: c.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	s.args = append([]string{"--tls-cert-file", c.cert, "--tls-key-file", c.key, "--tls-ca-cert-file", c.ca,
		"--tls-client-cert-file", c.clientCert, "--tls-client-key-file", c.clientKey,
		"--tls-auth-clients", "no"}, s.args...)
}
