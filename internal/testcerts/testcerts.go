// Package testcerts makes certificate authorities and the certificates
// they sign for tests: TLS servers on loopback, mTLS clients, a TLS-only
// redis-server. Keys are ECDSA P-256; everything is valid from an hour ago
// for a day.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"time"
)

// CA is a certificate authority made up for a test.
type CA struct {
	// Pool trusts the authority.
	Pool *x509.CertPool
	// PEM is the authority's certificate, PEM-encoded.
	PEM []byte

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Leaf describes a certificate a CA issues.
type Leaf struct {
	// CommonName is the subject's common name.
	CommonName string
	// Serial is the certificate's serial number.
	Serial int64
	// Server makes a server certificate for DNSNames and IPs; a client
	// certificate otherwise.
	Server   bool
	DNSNames []string
	IPs      []net.IP
}

// NewCA makes an authority named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := template(name, 1)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Pool: pool, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}, nil
}

// Issue returns the certificate l describes, signed by ca, and its key,
// both PEM-encoded.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := template(l.CommonName, l.Serial)
	tmpl.KeyUsage, tmpl.ExtKeyUsage = x509.KeyUsageDigitalSignature, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if l.Server {
		tmpl.DNSNames, tmpl.IPAddresses, tmpl.ExtKeyUsage = l.DNSNames, l.IPs, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

func template(cn string, serial int64) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)}
}
