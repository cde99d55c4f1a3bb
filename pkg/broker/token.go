package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Secret is the Secret in a member cluster's Causeway namespace holding
// its broker credentials, as `causewayctl join` writes it and the gateway
// and MCS controller Pods mount it: key SecretKubeconfig is a kubeconfig
// whose user reads its token from the file SecretToken next to it
// (tokenFile, which client-go reads again every minute and after a 401),
// key SecretToken the token itself.
const (
	Secret           = "causeway-broker"
	SecretKubeconfig = "kubeconfig"
	SecretToken      = "token"
)

// Token lifetimes. The API server may cap them
// (--service-account-max-token-expiration); TokenRequest refuses less than
// MinTokenLifetime.
const (
	// JoinTokenLifetime is the lifetime of the token in a join file
	// (EnsureClusterIdentity): the join must happen within it.
	JoinTokenLifetime = 24 * time.Hour
	// DefaultTokenLifetime is the lifetime of the tokens the Rotator
	// requests unless told otherwise.
	DefaultTokenLifetime = time.Hour
	// MinTokenLifetime is the shortest lifetime TokenRequest issues.
	MinTokenLifetime = 10 * time.Minute
)

// Token requests a token of clusterID's broker ServiceAccount valid for
// lifetime, with cfg: a broker administrator's identity, or the member's
// own (OwnRules lets it request tokens for itself, nothing else). It
// returns the token and its expiry.
func Token(ctx context.Context, cfg *rest.Config, clusterID string, lifetime time.Duration) (string, time.Time, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("broker client: %w", err)
	}
	secs := int64(lifetime / time.Second)
	ns := Namespace(clusterID)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("request token for %s/%s: %w", ns, ServiceAccountName, err)
	}
	return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
}

// SecretData turns a member kubeconfig with the token in it (a join file)
// into the data of Secret: the kubeconfig with the token moved to the file
// SecretToken, and the token.
func SecretData(kubeconfig []byte) (map[string][]byte, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parse broker kubeconfig: %w", err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("broker kubeconfig: no current context")
	}
	user, ok := cfg.AuthInfos[ctx.AuthInfo]
	if !ok || user.Token == "" {
		return nil, fmt.Errorf("broker kubeconfig: user %q has no token", ctx.AuthInfo)
	}
	token := user.Token
	user.Token, user.TokenFile = "", SecretToken
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("write broker kubeconfig: %w", err)
	}
	return map[string][]byte{SecretKubeconfig: out, SecretToken: []byte(token)}, nil
}

// RESTConfigFromSecret is the client configuration of Secret's data (as
// SecretData makes it), read from the API rather than from its files.
func RESTConfigFromSecret(data map[string][]byte) (*rest.Config, error) {
	cfg, err := clientcmd.Load(data[SecretKubeconfig])
	if err != nil {
		return nil, fmt.Errorf("parse broker kubeconfig: %w", err)
	}
	if len(data[SecretToken]) == 0 {
		return nil, fmt.Errorf("no key %q", SecretToken)
	}
	for _, u := range cfg.AuthInfos {
		u.Token, u.TokenFile = string(data[SecretToken]), ""
	}
	return clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
}

// Rotator keeps a member cluster's broker token short-lived. It is the one
// authority for that token: it requests a fresh token for the member's
// own broker ServiceAccount (Token) and writes it into Secret, whose
// mounted file every daemon reads; nothing else writes it after the join.
// A daemon thus picks up each new token within a minute (client-go's
// tokenFile cache; at once after a 401), half a token's lifetime before
// the old one expires.
type Rotator struct {
	// Broker is the member's broker identity to start from (the Secret's
	// token); each rotation continues with the token it obtained.
	Broker *rest.Config
	// Local writes Secret in the member cluster (a merge patch of the
	// token alone: it needs no right to read Secrets).
	Local client.Client
	// Namespace is the Secret's namespace in the member cluster.
	Namespace string
	// ClusterID is the member's ID.
	ClusterID string
	// Lifetime is requested for every token (at least MinTokenLifetime).
	Lifetime time.Duration
	// Log receives the rotations and their failures.
	Log *slog.Logger
	// Rotated, if set, is told each stored token's expiry; Failed each
	// failed attempt.
	Rotated func(expiry time.Time)
	Failed  func(error)
}

// RetryInterval bounds the wait between failed rotation attempts (they
// back off from a second up to it); the current token stays valid
// meanwhile.
const RetryInterval = time.Minute

// Run rotates the token at once (so the join file's token leaves the
// Secret, and a restarted rotator does not rely on a file the kubelet may
// not have refreshed yet), then each time half the current token's
// lifetime has passed, until ctx ends.
func (r *Rotator) Run(ctx context.Context) error {
	cfg := r.Broker
	wait, backoff := time.Duration(0), time.Second
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		issued := time.Now()
		token, expiry, err := r.Rotate(ctx, cfg)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.Log.Warn("broker token rotation failed; retrying", "err", err, "retryIn", backoff)
			if r.Failed != nil {
				r.Failed(err)
			}
			wait, backoff = backoff, min(2*backoff, RetryInterval)
			continue
		}
		cfg = rest.AnonymousClientConfig(r.Broker)
		cfg.BearerToken = token
		wait, backoff = expiry.Sub(issued)/2, time.Second
		r.Log.Info("broker token rotated", "expires", expiry, "next", issued.Add(wait))
		if r.Rotated != nil {
			r.Rotated(expiry)
		}
	}
}

// Rotate requests a new token with cfg (the member's current identity) and
// stores it in Secret. It returns the token and its expiry.
func (r *Rotator) Rotate(ctx context.Context, cfg *rest.Config) (string, time.Time, error) {
	token, expiry, err := Token(ctx, cfg, r.ClusterID, r.Lifetime)
	if err != nil {
		return "", time.Time{}, err
	}
	patch, err := json.Marshal(map[string]any{"data": map[string][]byte{SecretToken: []byte(token)}})
	if err != nil {
		return "", time.Time{}, err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: Secret}}
	if err := r.Local.Patch(ctx, sec, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return "", time.Time{}, fmt.Errorf("store the broker token in Secret %s/%s: %w", r.Namespace, Secret, err)
	}
	return token, expiry, nil
}
