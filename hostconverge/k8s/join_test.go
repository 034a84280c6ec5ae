package k8s

import "testing"

func TestAPIEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"https://10.0.0.1:6443":         "10.0.0.1:6443",
		"https://k8s.example.com":       "k8s.example.com:443",
		"https://[fd00::1]:6443/":       "[fd00::1]:6443",
		"https://k8s.example.com/base/": "k8s.example.com:443",
	} {
		if got, err := apiEndpoint(in); err != nil || got != want {
			t.Errorf("apiEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if server := kubeconfigServer([]byte("clusters:\n- cluster:\n    server: \"https://10.0.0.2:6443\"\n")); server != "https://10.0.0.2:6443" {
		t.Errorf("server %q", server)
	}
}
