package service

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/telemetry"
)

// ServerTLS returns the server's TLS configuration. The certificate is read
// now, then read again when the certificate or key file has changed (its
// modification time or size), checked at most every ReloadInterval during a
// handshake: new connections get the new certificate, existing ones and
// their streams keep running. A file that fails to load is logged and the
// previous certificate kept. A certificate that is expired, not valid
// yet, about to expire or self-signed is loaded with a warning, and the
// expiry of the one served is the gauge completiond.tls.certificate.expiry
// of tel. now is the clock; nil uses time.Now.
func ServerTLS(f config.TLSFiles, log *slog.Logger, now func() time.Time, tel telemetry.Telemetry) (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("tls: both a certificate file and a key file are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	if f.ReloadInterval <= 0 {
		f.ReloadInterval = config.DefaultTLSReload
	}
	r := &certReloader{files: f, log: log, now: now}
	if err := r.load(); err != nil {
		return nil, err
	}
	r.checked = now()
	telemetry.ObserveCertificateExpiry(tel, r.notAfter)
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls client CA: %s holds no PEM certificate", f.ClientCAFile)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tc, nil
}

// certReloader hands out the server certificate, reloading it when its
// files change. Handshakes share it; none starts a goroutine.
type certReloader struct {
	files config.TLSFiles
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp // of the certificate and key files when cert was read
	checked time.Time    // last look at the files
}

// fileStamp is what tells that a file changed.
type fileStamp struct {
	mod  int64 // nanoseconds since the epoch
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime().UnixNano(), size: fi.Size()}, nil
}

// load reads the certificate and key; r.mu is held or r is not shared yet.
func (r *certReloader) load() error {
	var stamp [2]fileStamp
	for i, p := range []string{r.files.CertFile, r.files.KeyFile} {
		s, err := stampOf(p)
		if err != nil {
			return fmt.Errorf("tls: %w", err)
		}
		stamp[i] = s
	}
	cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	if cert.Leaf == nil { // set by LoadX509KeyPair, unless GODEBUG x509keypairleaf=0
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("tls: %w", err)
		}
	}
	r.cert, r.stamp = &cert, stamp
	r.warn(cert.Leaf)
	return nil
}

// CertExpiryWarning is how long before its expiry a certificate loaded
// is warned about.
const CertExpiryWarning = 14 * 24 * time.Hour

// warn logs what will make clients refuse leaf, the certificate just
// loaded: expired, not valid yet, expiring within CertExpiryWarning,
// self-signed. It is loaded all the same: a renewal may be on its way, and
// a test setup may want one.
func (r *certReloader) warn(leaf *x509.Certificate) {
	now, file := r.now(), r.files.CertFile
	switch {
	case now.After(leaf.NotAfter):
		r.log.Warn("tls certificate expired: clients will refuse it", "cert", file, "not_after", leaf.NotAfter)
	case now.Before(leaf.NotBefore):
		r.log.Warn("tls certificate not valid yet: clients will refuse it", "cert", file, "not_before", leaf.NotBefore)
	case leaf.NotAfter.Sub(now) < CertExpiryWarning:
		r.log.Warn("tls certificate expires soon", "cert", file, "not_after", leaf.NotAfter)
	}
	if selfSigned(leaf) {
		r.log.Warn("tls certificate is self-signed: only clients given it will trust it", "cert", file)
	}
}

// selfSigned reports whether c is signed by its own key.
func selfSigned(c *x509.Certificate) bool {
	return bytes.Equal(c.RawIssuer, c.RawSubject) && c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature) == nil
}

// notAfter is the expiry of the certificate served now.
func (r *certReloader) notAfter() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert.Leaf.NotAfter
}

// get is tls.Config.GetCertificate.
func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= r.files.ReloadInterval {
		r.checked = now
		if r.changed() {
			if err := r.load(); err != nil {
				r.log.Error("tls certificate reload failed; keeping the previous one", "error", err)
			} else {
				r.log.Info("tls certificate reloaded", "cert", r.files.CertFile, "not_after", r.cert.Leaf.NotAfter)
			}
		}
	}
	return r.cert, nil
}

// changed reports whether a file differs from when the certificate was
// read.
func (r *certReloader) changed() bool {
	for i, p := range []string{r.files.CertFile, r.files.KeyFile} {
		s, err := stampOf(p)
		if err != nil || s != r.stamp[i] {
			return true
		}
	}
	return false
}
