#!/usr/bin/env bash
# Runs the push steps of docs/deploying.md as written (make image-push
# DEST=oci:… and DEST=dir:…) for the image make image built, and checks
# that each destination holds that image: an OCI layout whose index names
# the tag, and a dir: copy with its manifest, config and every layer, each
# of the digest the manifest says. CI runs it after make image.
#
# Environment: IMAGE (default localhost/completiond:dev), BUILDAH (default
# "buildah --storage-driver vfs"), MAKE (make).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-localhost/completiond:dev}
BUILDAH=${BUILDAH:-buildah --storage-driver vfs}
MAKE=${MAKE:-make}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "image-push-check: $*" >&2; exit 1; }

"$MAKE" --no-print-directory image-push IMAGE="$IMAGE" BUILDAH="$BUILDAH" DEST="oci:$out/oci:dev"
[ -s "$out/oci/index.json" ] || fail "oci: no index.json"
grep -q '"org.opencontainers.image.ref.name":"dev"' "$out/oci/index.json" || fail "oci: index.json does not name the tag dev: $(cat "$out/oci/index.json")"

"$MAKE" --no-print-directory image-push IMAGE="$IMAGE" BUILDAH="$BUILDAH" DEST="dir:$out/dir"
[ -s "$out/dir/manifest.json" ] || fail "dir: no manifest.json"
# Every blob the manifest names is there, with the digest it names.
digests=$(grep -o '"digest": *"sha256:[0-9a-f]*"' "$out/dir/manifest.json" | grep -o '[0-9a-f]\{64\}')
[ -n "$digests" ] || fail "dir: the manifest names no blobs"
n=0
for d in $digests; do
	[ -f "$out/dir/$d" ] || fail "dir: blob $d is missing"
	[ "$(sha256sum "$out/dir/$d" | cut -d' ' -f1)" = "$d" ] || fail "dir: blob $d does not have its digest"
	n=$((n + 1))
done
# The image's own configuration came along: its entrypoint is the server.
grep -l '"Entrypoint"' "$out"/dir/* | xargs grep -q 'completiond' || fail "dir: no configuration with completiond's entrypoint"
echo "image-push-check: $IMAGE pushed into an OCI layout and a dir: directory ($n blobs, digests checked)"
