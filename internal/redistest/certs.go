package redistest

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"

	"github.com/completiond/completiond/internal/testcerts"
)

// writeCertificates writes into dir a fresh certificate authority (ca.pem)
// and a server certificate for 127.0.0.1 it signed (server.pem, with its
// key in server-key.pem), and returns their paths and a pool that trusts
// the authority.
func writeCertificates(dir string) (ca, cert, key string, pool *x509.CertPool, err error) {
	authority, err := testcerts.NewCA("redistest CA")
	if err != nil {
		return "", "", "", nil, err
	}
	certPEM, keyPEM, err := authority.Issue(testcerts.Leaf{CommonName: "127.0.0.1", Serial: 2, Server: true,
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return "", "", "", nil, err
	}
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	for path, b := range map[string][]byte{ca: authority.PEM, cert: certPEM, key: keyPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return "", "", "", nil, err
		}
	}
	return ca, cert, key, authority.Pool, nil
}
