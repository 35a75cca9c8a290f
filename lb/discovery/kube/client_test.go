package kube

import (
	"os"
	"path/filepath"
	"testing"
)

// Outside a pod, Connect reads the kubeconfig named, else $KUBECONFIG, and
// its context's namespace is the default, "default" when it names none.
func TestConnectKubeconfig(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a pod, whatever runs the test
	dir := t.TempDir()
	write := func(name, namespace string) string {
		path := filepath.Join(dir, name)
		conf := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:6443\"}\n" +
			"users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u, namespace: \"" + namespace + "\"}\n" +
			"current-context: x\n"
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	f := func(kubeconfig, want string) {
		t.Helper()
		pods, ns, err := Connect(kubeconfig)
		if err != nil || pods == nil || ns != want {
			t.Fatalf("Connect(%q): got %v, namespace %q, %v; want a client, namespace %q", kubeconfig, pods, ns, err, want)
		}
	}
	f(write("llm", "llm"), "llm")
	t.Setenv("KUBECONFIG", write("none", ""))
	f("", "default")
	if _, _, err := Connect(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing kubeconfig: got no error")
	}
}
