package stack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The API server's files in its certificate directory, under the names envtest uses: envtest
// generates none of them when apiserver.crt exists.
const (
	apiServerCertFile = "apiserver.crt"
	apiServerKeyFile  = "apiserver.key"
	saSignerCertFile  = "sa-signer.crt"
	saSignerKeyFile   = "sa-signer.key"
	// caFile is the CA of the serving certificate: kube-controller-manager's --root-ca-file,
	// which it publishes to every namespace as the ConfigMap kube-root-ca.crt, the CA the
	// pods' in-cluster clients trust.
	caFile = "ca.crt"
)

// apiServerNames are the names pods and the node use for the API server: the service's
// DNS names (in-cluster clients connect to the `kubernetes` Service's ClusterIP, which is
// also in the certificate) and localhost.
var apiServerNames = []string{
	"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
}

// writeAPIServerPKI writes into dir what envtest would generate, with the addresses a
// cluster's API server has: a CA, a serving certificate valid for ips (its own address,
// the `kubernetes` Service's ClusterIP) and apiServerNames, and the service account signing
// key pair. It returns the CA in PEM.
func writeAPIServerPKI(dir string, ips ...net.IP) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "sandboxpool-e2e-apiserver-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: apiServerNames, IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1)}, ips...),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caPEM := pemOf("CERTIFICATE", caDER)
	files := map[string][]byte{caFile: caPEM, apiServerCertFile: pemOf("CERTIFICATE", der)}
	for name, k := range map[string]*ecdsa.PrivateKey{apiServerKeyFile: key, saSignerKeyFile: saKey} {
		b, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, err
		}
		files[name] = pemOf("EC PRIVATE KEY", b)
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	files[saSignerCertFile] = pemOf("PUBLIC KEY", saPub)
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return caPEM, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
