package kubeapi

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigForToken writes a kubeconfig for this server that authenticates with a
// bearer token, e.g. one from ServiceAccountToken.
func (s *Server) KubeconfigForToken(path, token string) error {
	return s.writeKubeconfig(path, "token", &rest.Config{
		Host:            s.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CAData},
		BearerToken:     token,
	})
}

// ServiceAccountToken returns a token for the ServiceAccount namespace/name from the
// TokenRequest API. ttl 0 takes the server's default (1 h); the API refuses less than
// 10 minutes.
func (s *Server) ServiceAccountToken(ctx context.Context, namespace, name string, ttl time.Duration) (string, error) {
	req := &authenticationv1.TokenRequest{}
	if ttl > 0 {
		secs := int64(ttl / time.Second)
		req.Spec.ExpirationSeconds = &secs
	}
	resp, err := s.Clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return resp.Status.Token, nil
}

// writeKubeconfig embeds certificates and keys rather than pointing at files, so the
// kubeconfig stays valid when copied elsewhere (e.g. into a container).
func (s *Server) writeKubeconfig(path, user string, c *rest.Config) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubeapi"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: c.CertData,
		ClientKeyData:         c.KeyData,
		Token:                 c.BearerToken,
	}
	cfg.Contexts["kubeapi"] = &clientcmdapi.Context{Cluster: "kubeapi", AuthInfo: user}
	cfg.CurrentContext = "kubeapi"
	return clientcmd.WriteToFile(*cfg, path)
}
