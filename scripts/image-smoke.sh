#!/usr/bin/env bash
# Smoke test of completiond's container image, without a container runtime
# (make image-smoke; .ci/run). It proves that the image, as built:
#
#   - is configured as documented: numeric non-root user, COMPLETIOND_ADDR on
#     0.0.0.0:50051, ports 50051 and 9464, CA certificates, a static binary;
#   - refuses to start on 0.0.0.0 without authentication (its default);
#   - serves from a read-only root filesystem, as its own user (65532), with
#     an API key: health SERVING without the key, a Stream refused without
#     it, and a whole Stream on the sim route with it;
#   - stops cleanly (exit 0) on SIGTERM.
#
# How: `buildah from` + `buildah mount` give the image's root filesystem;
# in a private mount namespace (unshare) it is bind-mounted read-only and the
# entrypoint runs there with chroot --userspec, with the image's environment
# only. The network is the host's: the address is overridden with
# 127.0.0.1:0 and the port read from the server's "serving" log line.
# Everything is removed on exit, failure or timeout.
#
# Environment: IMAGE (localhost/completiond:dev), BUILDAH ("buildah
# --storage-driver vfs", as scripts/image-build.sh), GRPCURL (bin/grpcurl),
# SMOKE_TIMEOUT (seconds for the whole test, 120).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/completiond:dev}
BUILDAH=${BUILDAH:-buildah --storage-driver vfs}
GRPCURL=${GRPCURL:-$PWD/bin/grpcurl}
SMOKE_TIMEOUT=${SMOKE_TIMEOUT:-120}
KEY="smoke-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"

fail() { echo "image-smoke: FAIL: $*" >&2; exit 1; }
step() { echo "image-smoke: $*"; }

[ "$(id -u)" = 0 ] || fail "needs root (buildah mount, unshare, chroot)"
[ -x "$GRPCURL" ] || fail "no grpcurl at $GRPCURL (make tools)"

ctr= mnt= pid= watchdog=
work=$(mktemp -d)
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	[ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null || true
	if [ -n "$ctr" ]; then
		$BUILDAH umount "$ctr" >/dev/null 2>&1 || true
		$BUILDAH rm "$ctr" >/dev/null 2>&1 || true
	fi
	if [ "$rc" != 0 ] && [ -s "$work/server.log" ]; then
		echo "--- server output" >&2
		cat "$work/server.log" >&2
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'echo "image-smoke: FAIL: interrupted or timed out" >&2; exit 1' INT TERM
# Bound the whole test: the watchdog signals this shell, whose trap cleans up.
( trap 'kill $! 2>/dev/null; exit 0' TERM; sleep "$SMOKE_TIMEOUT" & wait $!; kill -TERM $$ ) 2>/dev/null &
watchdog=$!

# --- the image's configuration
inspect() { $BUILDAH inspect --type image --format "$1" "$IMAGE"; }
inspect "{{.FromImageID}}" >/dev/null || fail "no image $IMAGE in buildah's storage (make image)"
user=$(inspect '{{.OCIv1.Config.User}}')
mapfile -t entry < <(inspect '{{range .OCIv1.Config.Entrypoint}}{{println .}}{{end}}' | sed '/^$/d')
mapfile -t imgenv < <(inspect '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' | sed '/^$/d')
ports=$(inspect '{{range $p, $_ := .OCIv1.Config.ExposedPorts}}{{$p}} {{end}}')
step "image $IMAGE: user=$user entrypoint=${entry[*]} env=${imgenv[*]} ports=$ports"
[[ $user =~ ^[0-9]+(:[0-9]+)?$ ]] || fail "user '$user' is not numeric (runAsNonRoot cannot check a name)"
[ "${user%%:*}" != 0 ] || fail "the image runs as root"
[[ $user == *:* ]] || user="$user:$user"
[ "${#entry[@]}" -gt 0 ] || fail "no entrypoint"
printf '%s\n' "${imgenv[@]}" | grep -qx 'COMPLETIOND_ADDR=0.0.0.0:50051' || fail "COMPLETIOND_ADDR is not 0.0.0.0:50051"
printf '%s\n' "${imgenv[@]}" | grep -q '^COMPLETIOND_INSECURE_NO_AUTH=' && fail "the image turns authentication off"
for p in 50051/tcp 9464/tcp; do [[ " $ports " == *" $p "* ]] || fail "port $p not exposed"; done

ctr=$($BUILDAH from --pull-never "$IMAGE")
mnt=$($BUILDAH mount "$ctr")
step "container $ctr mounted at $mnt"
[ -x "$mnt${entry[0]}" ] || fail "entrypoint ${entry[0]} is not an executable of the image"
[ -s "$mnt/etc/ssl/certs/ca-certificates.crt" ] || fail "no CA certificates at /etc/ssl/certs/ca-certificates.crt"
grep -q 'BEGIN CERTIFICATE' "$mnt/etc/ssl/certs/ca-certificates.crt" || fail "the CA bundle holds no certificate"
if command -v go >/dev/null; then
	go version -m "$mnt${entry[0]}" | grep -q 'CGO_ENABLED=0' || fail "the binary is not built with CGO_ENABLED=0"
fi

# image_cmd ENV... : the command that runs the entrypoint in a private mount
# namespace where the root filesystem is read-only, chrooted, as the image's
# user, with only the image's environment plus ENV. Each step execs the next,
# so that the process started is, in the end, completiond itself.
image_cmd() {
	cmd=(unshare --mount --propagation private -- sh -c '
		root=$1; shift
		mount --bind "$root" "$root" && mount -o remount,bind,ro "$root" || exit 97
		exec "$@"' sh "$mnt"
		env -i "${imgenv[@]}" "$@" chroot --userspec="$user" "$mnt" "${entry[@]}")
}

# --- version, as the image's user on the read-only root
image_cmd
v=$("${cmd[@]}" --version) || fail "--version failed"
step "$v"

# --- the default: 0.0.0.0 without a key is refused
step "without a key, on the image's 0.0.0.0:50051: must refuse to start"
set +e
timeout 10 "${cmd[@]}" >"$work/server.log" 2>&1
rc=$?
set -e
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "started without authentication on 0.0.0.0 (exit $rc)"
grep -q 'refusing to serve on 0.0.0.0:50051 without authentication' "$work/server.log" || fail "no refusal message"
step "refused: $(tail -1 "$work/server.log")"

# --- with a key, on a free loopback port
image_cmd COMPLETIOND_API_KEY="$KEY" COMPLETIOND_ADDR=127.0.0.1:0 COMPLETIOND_SIM_PACE=2ms
"${cmd[@]}" >"$work/server.log" 2>&1 &
pid=$!
addr=
for _ in $(seq 100); do
	kill -0 "$pid" 2>/dev/null || fail "the server exited at start"
	addr=$(sed -n 's/.*"msg":"serving","addr":"\([^"]*\)".*/\1/p' "$work/server.log" | head -1)
	[ -n "$addr" ] && break
	sleep 0.1
done
[ -n "$addr" ] || fail "no serving line within 10s"
step "serving on $addr (pid $pid)"
uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
[ "$uid" = "${user%%:*}" ] || fail "the server runs as uid $uid, not ${user%%:*}"
# The process's own root, as it sees its mounts: read-only.
awk '$5 == "/" {print $6}' "/proc/$pid/mountinfo" | grep -q '^ro' || fail "the server's root filesystem is not read-only"
step "runs as uid $uid, root filesystem read-only"

g() { "$GRPCURL" -plaintext -max-time 20 "$@"; }
# Health without a key, as a kubelet's grpc probe asks it: reflection needs a
# key, so grpcurl reads the (stable) service definition from a file.
cat >"$work/health.proto" <<'PROTO'
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }
PROTO
health=$(g -import-path "$work" -proto health.proto -d '{}' "$addr" grpc.health.v1.Health/Check 2>&1) || fail "health check failed: $health"
grep -q '"SERVING"' <<<"$health" || fail "health: $health"
step "health: SERVING, without a key"

req='{"messages":[{"role":"ROLE_USER","content":[{"text":{"text":"Smoke test."}}]}],"metadata":{"sim.words":"8","sim.faults":"rate_limit"}}'
# Without a key: reflection (and so the call) is refused.
set +e
out=$(g -d "$req" "$addr" completion.v1.Completion/Stream 2>&1)
set -e
grep -q 'Unauthenticated' <<<"$out" || fail "a call without a key was not refused: $out"
step "without a key: Unauthenticated"

out=$(g -H "authorization: Bearer $KEY" -d "$req" "$addr" completion.v1.Completion/Stream) || fail "Stream failed: $out"
grep -q '"route": "sim"' <<<"$out" || fail "no sim route in: $out"
grep -q 'TRANSITION_REASON_RETRY' <<<"$out" || fail "no RETRY in: $out"
grep -q '"terminal": true' <<<"$out" || fail "no terminal transition in: $out"
grep -q '"result"' <<<"$out" || fail "no result in: $out"
grep -q 'STOP_REASON_END_TURN' <<<"$out" || fail "not completed: $out"
step "Stream on sim with the key: $(grep -c '"seq"' <<<"$out") events, RETRY then COMPLETED"

# --- SIGTERM: drains and exits 0
kill -TERM "$pid"
set +e
for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "still running 15s after SIGTERM"
wait "$pid"
rc=$?
set -e
pid=
[ "$rc" = 0 ] || fail "exit status $rc after SIGTERM"
grep -q '"msg":"stopped"' "$work/server.log" || fail "no stopped line"
step "SIGTERM: drained and exited 0"
step "PASS"
