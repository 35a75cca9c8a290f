// Package deploy holds what runs pdlb where PD clusters live (issue 24):
// the image (Dockerfile), the Kubernetes manifests (kubernetes/, applied with
// `kubectl apply -k`; kubernetes/workers/ an example of the SGLang pods they
// find), the Grafana dashboard (grafana/pdlb.json) and the Prometheus alerts
// (prometheus/alerts.yaml). None of them can run here, so its tests check
// what can be checked without a cluster: every manifest decodes strictly
// into the Kubernetes API types once kustomize has rendered it, every series
// the dashboard and the alerts query is one pdlb serves on /metrics, the
// rules parse as Prometheus parses them, and the image builds pdlb the way
// the Makefile does. The package has no code of its own; its tests' imports
// (Kubernetes, kustomize, Prometheus) are never linked into pdlb.
package deploy
