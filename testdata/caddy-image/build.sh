#!/usr/bin/env bash
# Builds a stand-in for the caddy:2 image from the Caddy binary on this host (e.g. Debian's
# `apt-get install caddy`), for deploy/compose-smoke.sh where no registry can be reached.
#   testdata/caddy-image/build.sh [TAG]        # default tag atrium-smoke/caddy:local
# CADDY=/path/to/caddy picks another binary. The binary may be dynamically linked: the
# libraries ldd names are copied beside it, at the same paths.
set -euo pipefail
tag=${1:-atrium-smoke/caddy:local}
caddy=${CADDY:-$(command -v caddy || true)}
[[ -x $caddy ]] || { echo "no caddy binary: install caddy or set CADDY=/path/to/caddy" >&2; exit 1; }
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
root=$ctx/rootfs
mkdir -p "$root"/{usr/bin,etc/caddy,etc/ssl/certs,config,data,srv,root,tmp}
chmod 1777 "$root/tmp"
cp "$caddy" "$root/usr/bin/caddy"
# Shared libraries and the dynamic loader (nothing for a static binary).
if ldd "$caddy" >/dev/null 2>&1; then
	for lib in $(ldd "$caddy" | grep -o '/[^ ]*'); do
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
fi
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
# As in the official image: look names up in /etc/hosts, then DNS (Docker's resolver
# answers for the compose service names).
echo 'hosts: files dns' > "$root/etc/nsswitch.conf"
echo 'root:x:0:0:root:/root:/sbin/nologin' > "$root/etc/passwd"
echo 'root:x:0:' > "$root/etc/group"
cp "$here/Dockerfile" "$ctx/Dockerfile"
docker build -q -t "$tag" "$ctx" >/dev/null
echo "$tag: $("$caddy" version | head -1)"
