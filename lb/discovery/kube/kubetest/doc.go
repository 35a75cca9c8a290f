// Package kubetest adapts client-go's fake clientset to package kube's
// Config.Pods, for tests: pdlb itself reads pods through a bare core/v1
// REST client (kube.Connect), and only tests link the typed clientset the
// fake is, with every API group's scheme (issue 24: the binary grows by
// no more than it must).
package kubetest
