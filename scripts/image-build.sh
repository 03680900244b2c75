#!/usr/bin/env bash
# Builds completiond's container image with buildah (make image).
#
#   scripts/image-build.sh local    FROM scratch (Containerfile.local): the static
#                                   binary is built here, on the checkout, and put
#                                   with the host's CA certificates into a
#                                   temporary build context. No registry needed.
#   scripts/image-build.sh source   Containerfile: golang builder, distroless final
#                                   stage. Pulls both base images.
#
# Environment: IMAGE (the tag, default localhost/completiond:dev), IMAGE_VERSION
# (when set, the image is also tagged with it: localhost/completiond:0.2.0), GO (go),
# BUILDAH (the buildah command, with its global flags: default
# "buildah --storage-driver vfs", which works as root without a daemon or
# overlay support), IMAGE_ISOLATION (chroot: RUN steps without a runtime).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-local}
IMAGE=${IMAGE:-localhost/completiond:dev}
GO=${GO:-go}
BUILDAH=${BUILDAH:-buildah --storage-driver vfs}
IMAGE_ISOLATION=${IMAGE_ISOLATION:-chroot}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

case $mode in
local)
	if [ ! -s "$CA_BUNDLE" ]; then
		echo "image-build: no CA bundle at $CA_BUNDLE (apt-get install ca-certificates, or set CA_BUNDLE)" >&2
		exit 1
	fi
	ctx=$(mktemp -d)
	trap 'rm -rf "$ctx"' EXIT
	# The same build as Containerfile's, but on the checkout: -buildvcs
	# stamps the commit (completiond --version) when git can read it.
	CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=auto -ldflags='-s -w' -o "$ctx/completiond" ./cmd/completiond
	"$ctx/completiond" --version
	cp "$CA_BUNDLE" "$ctx/ca-certificates.crt"
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/passwd"
	printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/group"
	chmod 0755 "$ctx/completiond"
	chmod 0644 "$ctx/ca-certificates.crt" "$ctx/passwd" "$ctx/group"
	$BUILDAH bud --isolation "$IMAGE_ISOLATION" -f "$PWD/Containerfile.local" -t "$IMAGE" "$ctx"
	;;
source)
	$BUILDAH bud --isolation "$IMAGE_ISOLATION" -f Containerfile -t "$IMAGE" .
	;;
*)
	echo "usage: $0 local|source" >&2
	exit 2
	;;
esac
# The release version's tag too (IMAGE_VERSION, from make image): the Helm
# chart's default image is its appVersion, which is that version.
if [ -n "${IMAGE_VERSION:-}" ]; then
	repo=$IMAGE
	case ${IMAGE##*/} in *:*) repo=${IMAGE%:*} ;; esac
	$BUILDAH tag "$IMAGE" "$repo:$IMAGE_VERSION"
	$BUILDAH images "$repo:$IMAGE_VERSION"
fi
$BUILDAH images "$IMAGE"
