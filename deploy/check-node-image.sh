#!/usr/bin/env bash
# Checks an image built from deploy/node.Dockerfile (or deploy/uv.Dockerfile): it runs as uid 65532 with a writable
# HOME, and Atrium in it starts a stdio MCP server with `npx -y` (a download from the npm
# registry) until the server is ready and its tools are listed.
#   deploy/check-node-image.sh atrium:node [KEY=VALUE ...]
# KEY=VALUE pairs go into the MCP server's env, e.g. NODE_EXTRA_CA_CERTS=... behind a
# TLS-intercepting proxy. Needs docker, curl and a reachable npm registry. The container
# uses the host network (for engines without a bridge network) and port 18089.
# WARM_NPX=1 first runs the same `npx -y` once in the container, so that Atrium starts the
# server from a warm npm cache: Atrium gives a server 30 s to answer its first request,
# and a cold `npx -y` download that takes longer is killed at each attempt and never
# finishes (seen on a loaded machine: 79 s for the download alone).
set -euo pipefail
image=${1:?usage: $0 IMAGE [KEY=VALUE ...]}
shift
server='@modelcontextprotocol/server-everything@2026.8.31'
addr=127.0.0.1:18089
name=atrium-node-check-$$
jar=$(mktemp)
trap 'docker rm -fv "$name" >/dev/null 2>&1 || true; rm -f "$jar"' EXIT
fail() { echo "FAIL: $*" >&2; docker logs "$name" 2>&1 | tail -20 >&2 || true; exit 1; }

echo "== user and HOME"
docker run --rm --entrypoint sh "$image" -c \
	'set -e; test "$(id -u)" = 65532; test "$HOME" = /home/atrium; mkdir -p "$HOME/.npm"; echo "uid $(id -u), npm cache $(npm config get cache)"'

if docker run --rm --entrypoint sh "$image" -c 'command -v uvx' >/dev/null 2>&1; then
	echo "== uv and uvx run as uid 65532"
	docker run --rm --entrypoint sh "$image" -c 'set -e; uv --version; uvx --version; python3 --version; uv cache dir' || fail "uvx"
fi

echo "== Atrium starts $server with npx"
docker run -d --init --name "$name" --network host -e ATRIUM_ADDR=$addr "$image" >/dev/null
for _ in $(seq 1 50); do curl -fsS "http://$addr/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
if [[ ${WARM_NPX:-0} == 1 ]]; then
	warm_env=()
	for kv in "$@"; do warm_env+=(-e "$kv"); done
	warm_start=$(date +%s)
	# The server exits when its stdin closes; the download is what this is for.
	docker exec "${warm_env[@]}" "$name" sh -c "npx -y $server </dev/null >/dev/null 2>&1; ls \"\$HOME/.npm/_npx\"" >/dev/null ||
		fail "warming the npm cache"
	echo "npm cache warmed in $(($(date +%s) - warm_start)) s"
fi
curl -fsS "http://$addr/readyz" >/dev/null || fail "not ready"
csrf() { curl -fsS -b "$jar" -c "$jar" "http://$addr$1" | sed -n 's/.*name="_csrf" value="\([^"]*\)".*/\1/p' | head -1; }
post() { curl -sS -o /dev/null -w '%{http_code}' -b "$jar" -c "$jar" "http://$addr$1" "${@:2}"; }
[[ $(post /setup --data-urlencode "_csrf=$(csrf /setup)" -d username=admin \
	--data-urlencode 'password=admin password' --data-urlencode 'password2=admin password') == 303 ]] || fail "setup"
env_json=""
for kv in "$@"; do env_json+="${env_json:+,}\"${kv%%=*}\":\"${kv#*=}\""; done
json="{\"mcpServers\":{\"everything\":{\"command\":\"npx\",\"args\":[\"-y\",\"$server\"],\"env\":{$env_json}}}}"
[[ $(post /settings/mcp/import --data-urlencode "_csrf=$(csrf /settings/mcp)" --data-urlencode "json=$json") == 303 ]] || fail "import"
start=$(date +%s)
while :; do
	page=$(curl -fsS -b "$jar" "http://$addr/settings/mcp")
	state=$(sed -n 's/.*data-state="\([a-z]*\)" data-testid="mcp-state".*/\1/p' <<<"$page" | head -1)
	[[ $state == ready ]] && break
	(($(date +%s) - start > 300)) && fail "server state '$state' after 300 s: $(grep -o 'data-testid="mcp-error">[^<]*' <<<"$page" | head -1)"
	sleep 2
done
tools=$(grep -o '[0-9]* tools ·' <<<"$page" | head -1)
echo "ready after $(($(date +%s) - start)) s: $tools"
echo "ok"
