#!/usr/bin/env bash
# Builds every artifact of a release into dist/ (make dist): the server as a
# static Linux binary in a tarball, its container image as an OCI archive,
# the Python client's wheel and sdist, the npm package's tarball, and
# SHA256SUMS over all of them. make dist-check installs each into a clean
# environment and runs an example.
#
# Environment: VERSION (cmd/completiond/version.go's), IMAGE (the image make
# image built, default localhost/completiond:dev), BUILDAH, GO, PYTHON (Debian's
# /usr/bin/python3: it has python3-build, setuptools and the client's
# dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
VERSION=${VERSION:-$(sed -n 's/^const version = "\(.*\)"$/\1/p' cmd/completiond/version.go)}
IMAGE=${IMAGE:-localhost/completiond:dev}
BUILDAH=${BUILDAH:-buildah --storage-driver vfs}
GO=${GO:-go}
PYTHON=${PYTHON:-/usr/bin/python3}
dist=$root/dist
rm -rf "$dist"
mkdir -p "$dist"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The server: the static binary the image holds, with the license.
goos=$("$GO" env GOOS) goarch=$("$GO" env GOARCH)
name=completiond-$VERSION-$goos-$goarch
mkdir -p "$tmp/$name"
CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=auto -ldflags='-s -w' -o "$tmp/$name/completiond" ./cmd/completiond
cp LICENSE "$tmp/$name/"
tar -C "$tmp" -czf "$dist/$name.tar.gz" "$name"
echo "dist: $name.tar.gz ($("$tmp/$name/completiond" --version))"

# The container image make image built, as an OCI archive.
$BUILDAH push -q "$IMAGE" "oci-archive:$dist/completiond-$VERSION-image.oci.tar:$VERSION"
echo "dist: completiond-$VERSION-image.oci.tar ($IMAGE)"

# The Python client: wheel and sdist, built from a copy of its sources (the
# build writes next to them) without build isolation (no PyPI needed).
mkdir -p "$tmp/python"
cp -r clients/python/pyproject.toml clients/python/README.md clients/python/src "$tmp/python/"
find "$tmp/python" -name __pycache__ -prune -exec rm -rf {} + -o -name '*.egg-info' -prune -exec rm -rf {} +
PYTHONDONTWRITEBYTECODE=1 "$PYTHON" -m build --no-isolation --outdir "$dist" "$tmp/python" >"$tmp/python-build.log" 2>&1 ||
	{ cat "$tmp/python-build.log" >&2; exit 1; }
echo "dist: $(cd "$dist" && ls completiond_client-* completiond-client-*.tar.gz | tr '\n' ' ')"

# The npm package (npm pack runs its prepare script: tsc into dist/).
(cd clients/node && npm pack --silent --pack-destination "$dist" >/dev/null)
echo "dist: $(cd "$dist" && ls completiond-client-*.tgz)"

(cd "$dist" && sha256sum -- * >SHA256SUMS)
echo "dist: SHA256SUMS"
cat "$dist/SHA256SUMS"
