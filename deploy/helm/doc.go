// Package helm tests the Helm chart in completiond/: it renders the chart
// with `helm template` and checks what Kubernetes would run — probes, ports,
// security context, secrets, shutdown timing — and that the chart agrees
// with the container image (Containerfile, Containerfile.local).
//
// The test needs the helm binary: $HELM, else ./bin/helm at the repository
// root (make chart installs it). Without either it is skipped, so that
// make test needs no helm; make chart runs it with HELM set, and then a
// missing binary fails it.
package helm
