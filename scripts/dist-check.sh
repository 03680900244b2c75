#!/usr/bin/env bash
# Checks what make dist built (make dist-check): the checksums, then each
# artifact installed into a clean environment — nothing of the checkout on
# any path — and run against a real server (scripts/with-server):
#
#   the server tarball    unpacked, --version is the release's
#   the image archive     loaded by buildah, its entrypoint the server
#   the Python wheel      pip install into a fresh virtual environment; the
#   and the sdist         stream and asyncio examples run from there
#   the npm tarball       npm install into an empty project; imported from an
#                         ES module and from CommonJS; the stream example runs
#   the Go client         a fresh module with a replace of the checkout, as
#                         client/README.md says; a Stream runs
#
# The virtual environments see the system's site packages: grpcio and
# protobuf are Debian's (no PyPI here), and the checks prove the client comes
# from the environment, not from the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dist=$root/dist
VERSION=${VERSION:-$(sed -n 's/^const version = "\(.*\)"$/\1/p' cmd/completiond/version.go)}
BUILDAH=${BUILDAH:-buildah --storage-driver vfs}
GO=${GO:-go}
PYTHON=${PYTHON:-/usr/bin/python3}
[ -s "$dist/SHA256SUMS" ] || { echo "dist-check: no dist/SHA256SUMS: run make dist first" >&2; exit 1; }
(cd "$dist" && sha256sum --quiet -c SHA256SUMS)
echo "dist-check: checksums"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "dist-check: $*"; }
fail() { echo "dist-check: $*" >&2; exit 1; }

# The server tarball.
tar -C "$tmp" -xzf "$dist"/completiond-"$VERSION"-*.tar.gz
v=$("$tmp"/completiond-"$VERSION"-*/completiond --version)
case $v in "completiond $VERSION, "*) ok "server tarball: $v" ;; *) fail "server tarball: --version printed '$v'" ;; esac

# The image archive: buildah loads it (the image make image built, the same
# id), and its configuration runs the server.
id=$($BUILDAH pull -q "oci-archive:$dist/completiond-$VERSION-image.oci.tar")
entry=$($BUILDAH inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' "$id")
case $entry in *completiond*) ok "image archive: loads (image ${id:0:12}), entrypoint $entry" ;; *) fail "image archive: entrypoint '$entry'" ;; esac

# Everything else against a server.
export VERSION PYTHON GO tmp dist root
scripts/with-server bash -euo pipefail -c '
ok() { echo "dist-check: $*"; }
fail() { echo "dist-check: $*" >&2; exit 1; }
cd "$tmp"

for kind in wheel sdist; do
	case $kind in
	wheel) pkg=$(ls "$dist"/completiond_client-"$VERSION"-*.whl) ;;
	sdist) pkg=$dist/completiond-client-$VERSION.tar.gz ;;
	esac
	"$PYTHON" -m venv --system-site-packages "venv-$kind"
	PIP_DISABLE_PIP_VERSION_CHECK=1 "venv-$kind/bin/pip" install -q --no-index --no-deps --no-build-isolation "$pkg"
	where=$(cd / && "$tmp/venv-$kind/bin/python" -c "import completiond; print(completiond.__file__, completiond.__version__)")
	case $where in "$tmp/venv-$kind/"*" $VERSION") ;; *) fail "python $kind: completiond comes from $where" ;; esac
	out=$(cd / && PYTHONDONTWRITEBYTECODE=1 "$tmp/venv-$kind/bin/python" "$root/examples/python/stream.py")
	grep -q "\[transition COMPLETED, terminal\]" <<<"$out" || fail "python $kind: stream.py printed: $out"
	out=$(cd / && PYTHONDONTWRITEBYTECODE=1 "$tmp/venv-$kind/bin/python" "$root/examples/python/async_stream.py")
	grep -q "STREAM_RESUME COMPLETED" <<<"$out" || fail "python $kind: async_stream.py printed: $out"
	ok "python $kind: installs into a fresh virtual environment, stream.py and async_stream.py run"
done

mkdir npm && cd npm
npm init -y >/dev/null
npm install --silent --no-audit --no-fund "$dist/completiond-client-$VERSION.tgz" >/dev/null 2>&1 ||
	npm install --no-audit --no-fund "$dist/completiond-client-$VERSION.tgz"
node --input-type=module -e "import { Client, userText } from \"@completiond/client\"; if (typeof Client !== \"function\" || typeof userText !== \"function\") process.exit(1)" ||
	fail "npm: import from an ES module failed"
node -e "const { Client, userText } = require(\"@completiond/client\"); if (typeof Client !== \"function\" || typeof userText !== \"function\") process.exit(1)" ||
	fail "npm: require from CommonJS failed"
v=$(node -e "console.log(require(\"@completiond/client/package.json\").version)")
[ "$v" = "$VERSION" ] || fail "npm: version $v"
cp "$root/examples/node/stream.mjs" .
out=$(node stream.mjs)
grep -q "^\[COMPLETED, terminal\]" <<<"$out" || fail "npm: stream.mjs printed: $out"
ok "npm tarball: installs into an empty project, imports from ES modules and CommonJS, stream.mjs runs"
cd ..

mkdir gomod && cd gomod
"$GO" mod init example.com/distcheck >/dev/null 2>&1
"$GO" mod edit -require=github.com/completiond/completiond@v0.0.0 -replace="github.com/completiond/completiond=$root"
cat >main.go <<GO
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/completiond/completiond/client"
)

func main() {
	c, err := client.Connect(os.Getenv("COMPLETIOND_ADDR"), client.ConnectOptions{})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.Stream(ctx, client.Text("Explain backoff.", client.WithMetadata(map[string]string{"sim.faults": "rate_limit"})))
	if err != nil {
		panic(err)
	}
	f, err := s.Wait()
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Reason(), len(f.Transitions()))
}
GO
"$GO" mod tidy >/dev/null 2>&1 || "$GO" mod tidy
out=$("$GO" run .)
[ "$out" = "TRANSITION_REASON_COMPLETED 2" ] || fail "go: printed $out"
ok "go client: a module requiring the checkout (client/README.md), a Stream runs ($out)"
'
ok "every artifact of $VERSION installs and runs"
