package main

// Files the harness generates before kube-apiserver starts (PKI, tokens,
// kubeconfigs) and the RBAC it creates after the server is ready. All of them
// are reused when they already exist, so a restart over the same --data-dir
// keeps the CA and the tokens (only the port in the kubeconfigs may change).

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/csv"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pkiFiles are the paths of the generated key material.
type pkiFiles struct {
	dir         string
	caPEM       []byte // CA certificate, embedded into the kubeconfigs
	servingCert string
	servingKey  string
	saKey       string // service-account signing key (also used for verification)
}

// ensurePKI creates (or reuses) a self-signed CA, a serving certificate for
// 127.0.0.1/localhost/the in-cluster names signed by it, and an ECDSA
// service-account signing key.
func ensurePKI(dir string) (*pkiFiles, error) {
	p := &pkiFiles{
		dir:         dir,
		servingCert: filepath.Join(dir, "serving.crt"),
		servingKey:  filepath.Join(dir, "serving.key"),
		saKey:       filepath.Join(dir, "sa.key"),
	}
	caCertFile := filepath.Join(dir, "ca.crt")
	if allExist(caCertFile, filepath.Join(dir, "ca.key"), p.servingCert, p.servingKey, p.saKey) {
		ca, err := os.ReadFile(caCertFile)
		if err != nil {
			return nil, fmt.Errorf("read CA: %w", err)
		}
		if _, err := tls.LoadX509KeyPair(p.servingCert, p.servingKey); err == nil {
			p.caPEM = ca
			return p, nil
		}
		// Unreadable pair: fall through and regenerate everything.
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pki dir: %w", err)
	}

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber:          randSerial(),
		Subject:               pkix.Name{CommonName: "wasmformer-harness-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA: %w", err)
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: randSerial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now,
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback, net.ParseIP("10.0.0.1")},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign serving cert: %w", err)
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}

	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	writes := []struct {
		path string
		data []byte
	}{
		{caCertFile, p.caPEM},
		{filepath.Join(dir, "ca.key"), ecKeyPEM(caKey)},
		{p.servingCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})},
		{p.servingKey, ecKeyPEM(srvKey)},
		{p.saKey, ecKeyPEM(saKey)},
	}
	for _, w := range writes {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", w.path, err)
		}
	}
	return p, nil
}

func ecKeyPEM(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		panic(err) // only fails for unsupported curves
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func randSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n
}

func allExist(paths ...string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

// tokenFile is the static token file and the tokens it holds.
type tokenFile struct {
	file       string
	admin      string
	restricted string
}

// ensureTokens creates (or re-reads) the --token-auth-file:
// admin is in system:masters, restricted only in system:authenticated
// (added by the authenticator to every user).
func ensureTokens(path string) (*tokenFile, error) {
	t := &tokenFile{file: path}
	if f, err := os.Open(path); err == nil {
		defer f.Close()
		r := csv.NewReader(f)
		r.FieldsPerRecord = -1
		records, err := r.ReadAll()
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		for _, rec := range records {
			if len(rec) < 2 {
				continue
			}
			switch rec[1] {
			case adminUser:
				t.admin = rec[0]
			case restrictedUser:
				t.restricted = rec[0]
			}
		}
		if t.admin != "" && t.restricted != "" {
			return t, nil
		}
	}
	t.admin, t.restricted = randToken(), randToken()
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write([]string{t.admin, adminUser, "admin-uid", "system:masters"})
	_ = w.Write([]string{t.restricted, restrictedUser, "restricted-uid"})
	w.Flush()
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return t, nil
}

func randToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// writeKubeconfig writes a kubeconfig for one user (bearer token) with the
// CA embedded.
func writeKubeconfig(path, server string, caPEM []byte, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["harness"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "harness", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = user
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// httpsClient trusts only the harness CA.
func httpsClient(caPEM []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("CA PEM holds no certificate")
	}
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}, nil
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return strings.TrimSpace(string(b))
}

// grantRestricted lets the restricted user get/list/watch pods, configmaps
// and namespaces cluster-wide, and nothing else. Create-or-update, so it is
// idempotent over kept etcd data.
func grantRestricted(ctx context.Context, adminKubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", adminKubeconfig)
	if err != nil {
		return fmt.Errorf("load %s: %w", adminKubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	const name = "wasmformer-harness-restricted"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""},
			Resources: []string{"pods", "configmaps", "namespaces"},
			Verbs:     []string{"get", "list", "watch"},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: restrictedUser}},
	}

	roles := cs.RbacV1().ClusterRoles()
	if _, err := roles.Create(ctx, role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		existing, err := roles.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get clusterrole: %w", err)
		}
		existing.Rules = role.Rules
		if _, err := roles.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update clusterrole: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("create clusterrole: %w", err)
	}

	bindings := cs.RbacV1().ClusterRoleBindings()
	if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		existing, err := bindings.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get clusterrolebinding: %w", err)
		}
		existing.Subjects = binding.Subjects // roleRef is immutable and always the same
		if _, err := bindings.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update clusterrolebinding: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("create clusterrolebinding: %w", err)
	}
	return nil
}
