package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/better-compute/better-compute/hostconverge/debpkg"
	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// KubeletConf is the kubelet's credentials, which kubeadm join writes: a host that has it
// has joined.
const KubeletConf = "/etc/kubernetes/kubelet.conf"

// bootstrapToken is the form of a kubeadm bootstrap token.
var bootstrapToken = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)

// Join converges the k8s-join unit. The installed kubelet must be of kubernetesVersion
// (bcd does not install Kubernetes: the image carries it). The kubelet's extra arguments
// carry the node's labels and taints. A host without KubeletConf joins with kubeadm join,
// the token fetched from the secret store just then and never reported; a joined host
// has its kubelet restarted when the labels or taints changed, and is refused when it
// belongs to another cluster than server.
func Join(ctx context.Context, p *hostenv.Pass, s *hostunit.K8sJoin) error {
	if err := checkKubeletVersion(p, s.KubernetesVersion); err != nil {
		return err
	}
	endpoint, err := apiEndpoint(s.Server)
	if err != nil {
		return err
	}
	conf, joined, err := p.ReadOptional(KubeletConf)
	if err != nil {
		return err
	}
	if joined {
		if server := kubeconfigServer(conf); server != "" {
			if other, err := apiEndpoint(server); err != nil || other != endpoint {
				return proto.Errorf(proto.InvalidState, "the host belongs to the cluster at %s, not %s; run kubeadm reset on it to let it join", server, s.Server)
			}
		}
	}
	if !joined {
		if err := checkKubeadmReadsV1beta4(p, s.KubernetesVersion); err != nil {
			return err
		}
		if _, err := p.EnsureFile(KubeletDefaults, renderKubeletDefaults(s), 0o644); err != nil {
			return err
		}
		return kubeadmJoin(ctx, p, s, endpoint)
	}
	// A file an earlier pass changed without seeing the kubelet restart (killed, or a
	// failed restart) is due as one that changed now.
	changed, err := p.ChangeFile(KubeletDefaults, renderKubeletDefaults(s), 0o644)
	if err != nil || !changed {
		return err
	}
	if _, err := p.Change(ctx, "restarted kubelet for its new labels and taints", "systemctl", "restart", "kubelet"); err != nil {
		return err
	}
	return p.Applied(KubeletDefaults)
}

// kubeadmJoin fetches the token and runs kubeadm join with it in JoinConfig; the token
// appears on no command line and in no message.
func kubeadmJoin(ctx context.Context, p *hostenv.Pass, s *hostunit.K8sJoin, endpoint string) error {
	if p.Secrets == nil {
		return proto.Errorf(proto.Internal, "bcd has no secret store to fetch %s from", s.TokenRef)
	}
	secret, err := p.Secrets.Secret(ctx, s.TokenRef)
	if err != nil {
		return proto.Errorf(proto.CodeOf(err), "fetching the join token %s: %w", s.TokenRef, err)
	}
	token := strings.TrimSpace(string(secret))
	if !bootstrapToken.MatchString(token) {
		return proto.Errorf(proto.InvalidConfig, "the secret %s is not a bootstrap token (six and sixteen lower-case letters or digits, joined by a dot)", s.TokenRef).WithPath("tokenRef")
	}
	config, err := joinConfiguration(s, endpoint, token)
	if err != nil {
		return err
	}
	err = p.WithPrivateFile(JoinConfig, config, func() error {
		_, err := p.Runner.Run(ctx, "kubeadm", "join", "--config", JoinConfig)
		return err
	})
	if err != nil {
		code := proto.DriverError
		if ctx.Err() != nil {
			code = proto.Timeout
		}
		return proto.Errorf(code, "kubeadm join %s: %s", endpoint, strings.ReplaceAll(err.Error(), token, "<token>"))
	}
	p.Corrected("joined the cluster at %s with kubeadm (token from %s)", endpoint, s.TokenRef)
	return nil
}

// JoinConfig is where kubeadm join reads its JoinConfiguration, which carries the
// bootstrap token: a file of mode 0600 (root's alone), removed once kubeadm join returns,
// so the token is on no command line, which every user and process of the host reads in
// /proc/PID/cmdline. A file a bcd killed meanwhile left is removed by the next pass, or
// gone at the next boot (hostenv.PrivateDir).
const JoinConfig = hostenv.PrivateDir + "/kubeadm-join.yaml"

// joinConfiguration is the kubeadm JoinConfiguration that joins the host with token,
// checking the server's CA by its SPKI digest: kubeadm.k8s.io/v1beta4, which kubeadm reads
// from 1.31 on, or v1beta3 (1.22 to 1.35) for a unit whose kubernetesVersion is older than
// 1.31. It is JSON, which kubeadm's YAML reader takes as it is; kubeadm defaults the TLS
// bootstrap token to the discovery token, as its --token flag sets both.
func joinConfiguration(s *hostunit.K8sJoin, endpoint, token string) ([]byte, error) {
	apiVersion := "kubeadm.k8s.io/v1beta4"
	if beforeV1beta4(s.KubernetesVersion) {
		apiVersion = "kubeadm.k8s.io/v1beta3"
	}
	type bootstrapToken struct {
		APIServerEndpoint string   `json:"apiServerEndpoint"`
		Token             string   `json:"token"`
		CACertHashes      []string `json:"caCertHashes"`
	}
	type discovery struct {
		BootstrapToken bootstrapToken `json:"bootstrapToken"`
	}
	return json.Marshal(struct {
		APIVersion string    `json:"apiVersion"`
		Kind       string    `json:"kind"`
		Discovery  discovery `json:"discovery"`
	}{apiVersion, "JoinConfiguration", discovery{bootstrapToken{endpoint, token, []string{"sha256:" + s.CACertSHA256}}}})
}

// beforeV1beta4 reports whether version (vX.Y or vX.Y.Z) is a Kubernetes older than 1.31,
// whose kubeadm reads no kubeadm.k8s.io/v1beta4 configuration.
func beforeV1beta4(version string) bool {
	var major, minor int
	_, err := fmt.Sscanf(version, "v%d.%d", &major, &minor)
	return err == nil && major == 1 && minor < 31
}

// checkKubeadmReadsV1beta4 refuses to join with a unit that names no kubernetesVersion,
// whose JoinConfiguration is v1beta4, on a host whose kubeadm package is older than 1.31:
// that kubeadm fails on the file (no kind "JoinConfiguration" is registered for version
// "kubeadm.k8s.io/v1beta4"), an error that does not say which setting to change. A
// kubeadm that is no package of the host's
// (none where dpkg's status file is not, on any distribution) is left to run.
func checkKubeadmReadsV1beta4(p *hostenv.Pass, want string) error {
	if want != "" {
		return nil
	}
	pkgs, err := debpkg.Recorded(p)
	if err != nil {
		return err
	}
	installed, ok := pkgs["kubeadm"]
	if have := "v" + debpkg.Upstream(installed); ok && beforeV1beta4(have) {
		return proto.Errorf(proto.InvalidConfig, "kubeadm %s is installed, which reads no kubeadm.k8s.io/v1beta4 JoinConfiguration (kubeadm 1.31 and later do): "+
			"set the unit's kubernetesVersion to the version the image carries (%s), and bcd writes the v1beta3 that kubeadm 1.22 to 1.35 reads", have, have).WithPath("kubernetesVersion")
	}
	return nil
}

// apiEndpoint is the host:port kubeadm join takes for an https URL (port 443 when it
// names none).
func apiEndpoint(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil || u.Hostname() == "" {
		return "", proto.Errorf(proto.InvalidConfig, "%q is not an https URL of the API server", server).WithPath("server")
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// kubeconfigServer returns the first cluster server of a kubeconfig ("server: URL"). The
// lines are split without a bound on their length: a line before the server's (a CA
// bundle of many certificates) must not end the search, which would take the host as
// joined to the unit's cluster.
func kubeconfigServer(conf []byte) string {
	for line := range strings.SplitSeq(string(conf), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "server:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return ""
}

// checkKubeletVersion refuses a kubelet package of another version than want (vX.Y
// matches any vX.Y.Z); no want accepts any.
func checkKubeletVersion(p *hostenv.Pass, want string) error {
	if want == "" {
		return nil
	}
	pkgs, err := debpkg.Recorded(p)
	if err != nil {
		return err
	}
	installed, ok := pkgs["kubelet"]
	if !ok {
		return proto.Errorf(proto.InvalidState, "kubelet is not installed; the image must carry kubelet and kubeadm %s", want)
	}
	have := "v" + debpkg.Upstream(installed)
	if have != want && !strings.HasPrefix(have, want+".") {
		return proto.Errorf(proto.InvalidState, "kubelet %s is installed, the unit wants %s; the image must carry it", have, want).WithPath("kubernetesVersion")
	}
	return nil
}
