#!/usr/bin/env bash
# Builds a stand-in Node base image for deploy/node.Dockerfile from the Node.js installed
# on this host, for machines that cannot pull node:22-bookworm-slim:
#   testdata/node-base/build.sh [TAG]          # default tag atrium-smoke/node:local
#   docker build -f deploy/node.Dockerfile --build-arg NODE_IMAGE=atrium-smoke/node:local -t atrium:node .
# It holds node (with the libraries ldd names, at the same paths), npm and npx from the
# host's node_modules, busybox (static) for the POSIX shell and tools node.Dockerfile and
# npm need, and the host's CA bundle. Needs node, npm and /bin/busybox (busybox-static).
set -euo pipefail
tag=${1:-atrium-smoke/node:local}
node=$(command -v node) || { echo "no node on this host" >&2; exit 1; }
npm_dir=$(cd "$(dirname "$(readlink -f "$(command -v npm)")")/.." && pwd) # .../node_modules/npm
busybox=${BUSYBOX:-/bin/busybox}
[[ -x $busybox ]] || { echo "no static busybox at $busybox (apt-get install busybox-static)" >&2; exit 1; }
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root=$ctx/rootfs
mkdir -p "$root"/{bin,usr/bin,usr/local/lib/node_modules,etc/ssl/certs,tmp,root}
chmod 1777 "$root/tmp"
cp "$node" "$root/usr/bin/node"
for lib in $(ldd "$node" | grep -o '/[^ ]*'); do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
cp -a "$npm_dir" "$root/usr/local/lib/node_modules/npm"
ln -s ../local/lib/node_modules/npm/bin/npm-cli.js "$root/usr/bin/npm"
ln -s ../local/lib/node_modules/npm/bin/npx-cli.js "$root/usr/bin/npx"
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
	[[ -e $root/bin/$applet ]] || ln -s busybox "$root/bin/$applet"
done
ln -s /bin/env "$root/usr/bin/env" # npm's scripts start with #!/usr/bin/env node
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
echo 'root:x:0:' > "$root/etc/group"
echo 'hosts: files dns' > "$root/etc/nsswitch.conf"
cat > "$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/root
CMD ["node"]
DOCKERFILE
docker build -q -t "$tag" "$ctx" >/dev/null
echo "$tag: node $("$node" --version), npm $(npm --version)"
