#!/usr/bin/env bash
# Starts the real docker-compose.yml (Atrium behind Caddy) with ATRIUM_DOMAIN=localhost,
# so that Caddy signs the site with its own internal CA, checks it end to end through
# Caddy over HTTPS, prints PASS or FAIL per check, and removes everything it made.
#
#   deploy/compose-smoke.sh                         # from the repository root
#
# Needs: Docker with compose (`docker compose` or docker-compose 1.29), Go (for the
# fake model and the websocket client, testdata/composesmoke), curl, tar, and ports
# 80 and 443 free on this host (the compose file publishes them). The compose network's
# subnet 172.30.80.0/24 must be free too, so do not run it beside a real stack.
# Not part of CI: CI machines here have no Docker engine running.
#
# Settings (environment):
#   SMOKE_BUILD=0            do not build the atrium image: use the existing `atrium` image
#                            (e.g. built offline with --build-arg GO_IMAGE=...)
#   SMOKE_CADDY_IMAGE=IMAGE  use IMAGE instead of caddy:2 (e.g. the stand-in that
#                            testdata/caddy-image/build.sh makes when no registry is reachable)
#   SMOKE_KEEP=1             leave the stack, its volumes and the temporary key up at the
#                            end, for debugging (it prints the command that removes them)
#
# What it does to the compose file: a temporary override only replaces the Caddy image
# (when SMOKE_CADDY_IMAGE is set) and points the master-key secret at a new random key
# in a temporary directory, so that a real ./secrets/atrium_master_key is never touched.
# The project name is atrium-smoke, so its volumes are not a real installation's.
set -uo pipefail
cd "$(dirname "$0")/.."
project=atrium-smoke
domain=localhost
base=https://$domain
tmp=$(mktemp -d)
fake_pid=
failures=0
export ATRIUM_DOMAIN=$domain

if docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
	compose=(docker-compose)
else
	echo "neither 'docker compose' nor docker-compose found" >&2
	exit 2
fi

ms() { echo $(($(date +%s%N) / 1000000)); }
secs() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); } # milliseconds as seconds, one decimal
pass() { echo "PASS $1: $2"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }
# dc runs compose on the real file plus the override.
dc() { "${compose[@]}" -p "$project" -f docker-compose.yml -f "$tmp/override.yml" "$@"; }
ctr() { dc ps -q "$1"; }
cleanup() {
	[[ -n $fake_pid ]] && kill "$fake_pid" 2>/dev/null
	if [[ ${SMOKE_KEEP:-0} == 1 ]]; then
		# The secret and the override stay too: the containers mount the key from $tmp.
		echo "left running (SMOKE_KEEP=1); remove with: ATRIUM_DOMAIN=$domain ${compose[*]} -p $project" \
			"-f docker-compose.yml -f $tmp/override.yml down -v && rm -rf $tmp"
	else
		dc down -v --remove-orphans >/dev/null 2>&1
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT
# finish prints the summary and exits (the trap cleans up).
finish() {
	if ((failures)); then echo "== $failures check(s) FAILED"; exit 1; fi
	echo "== all checks passed"
	exit 0
}

# A fresh random key as the Docker secret. Compose without Swarm bind-mounts the file as
# it is, so uid 65532 in the container must be able to read it: 0444 inside a 0700
# directory keeps it away from other users of this host without needing chown.
key=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
mkdir -p "$tmp/secret" && chmod 0700 "$tmp" "$tmp/secret"
printf '%s\n' "$key" > "$tmp/secret/atrium_master_key"
chmod 0444 "$tmp/secret/atrium_master_key"
{
	if [[ -n ${SMOKE_CADDY_IMAGE:-} ]]; then
		printf 'services:\n  caddy:\n    image: %s\n' "$SMOKE_CADDY_IMAGE"
	fi
	printf 'secrets:\n  atrium_master_key:\n    file: %s\n' "$tmp/secret/atrium_master_key"
} > "$tmp/override.yml"

echo "== compose file"
if out=$(dc config -q 2>&1); then
	pass config "docker-compose.yml with ATRIUM_DOMAIN=$domain is valid (${compose[*]} config)"
else
	fail config "$out"
	finish
fi

echo "== build"
if ! go build -o "$tmp/composesmoke" ./testdata/composesmoke; then
	fail build "go build ./testdata/composesmoke"
	finish
fi
if [[ ${SMOKE_BUILD:-1} != 0 ]]; then
	start=$(date +%s)
	if dc build atrium; then
		pass build "atrium image built in $(($(date +%s) - start)) s"
	else
		fail build "${compose[*]} build atrium"
		finish
	fi
fi

# wait_https waits until Caddy answers /healthz over https with a certificate from its
# CA (copied out of the caddy-data volume, made at Caddy's first start).
wait_https() {
	local end=$(($(date +%s) + 120))
	while (($(date +%s) < end)); do
		if docker cp "$(ctr caddy):/data/caddy/pki/authorities/local/root.crt" - 2>/dev/null | tar -xO > "$tmp/root.crt" 2>/dev/null &&
			[[ -s $tmp/root.crt ]] && curl -fsS --cacert "$tmp/root.crt" -o /dev/null "$base/healthz" 2>/dev/null; then
			return 0
		fi
		sleep 0.5
	done
	return 1
}

# up starts the stack and reports how long it took until Caddy served Atrium over https.
up() { # up CHECK-NAME
	local start=$(ms)
	if ! out=$(dc up -d 2>&1); then
		fail "$1" "${compose[*]} up -d: $out"
		dc logs --tail 30 >&2
		finish
	fi
	local upped=$(ms)
	if ! wait_https; then
		fail "$1" "Caddy did not serve $base/healthz over https within 120 s"
		dc logs --tail 30 >&2
		finish
	fi
	pass "$1" "up -d returned after $(secs $((upped - start))) s (Atrium healthy), https through Caddy after $(secs $(($(ms) - start))) s"
}

echo "== up"
up up

# The fake model on the host, at the compose network's gateway: the address at which
# the Atrium container reaches this host (and no other network).
gateway=$(docker network inspect "${project}_atrium" -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' 2>/dev/null)
[[ -n $gateway ]] || gateway=172.30.80.1
"$tmp/composesmoke" fake-model -listen "$gateway:0" > "$tmp/fake.out" 2>&1 &
fake_pid=$!
for _ in $(seq 1 50); do grep -q '^listening on ' "$tmp/fake.out" && break; sleep 0.1; done
model="http://$(sed -n 's/^listening on //p' "$tmp/fake.out")/v1"

echo "== through Caddy: redirect, TLS, setup, cookies, websocket, streamed reply, login"
"$tmp/composesmoke" first -base "$base" -http "http://$domain" -ca "$tmp/root.crt" -model "$model" -state "$tmp/state" |
	tee "$tmp/first.out"
failures=$((failures + $(grep -c '^FAIL' "$tmp/first.out")))
grep -q '^PASS login' "$tmp/first.out" || finish

echo "== client address"
# Atrium trusts X-Forwarded-For from Caddy's fixed address only: its log must name the
# client as Caddy saw it, never Caddy itself and never the address the client forged.
logline=$(dc logs --no-color atrium 2>&1 | grep 'login failed' | tail -1)
caddy_ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$(ctr caddy)")
ip=$(grep -o 'ip=[^ ]*' <<<"$logline" | head -1)
if [[ -n $ip && $ip != "ip=$caddy_ip" && $logline != *203.0.113.9* ]]; then
	pass client-address "the failed login is logged with $ip (Caddy is $caddy_ip; the forged 203.0.113.9 ignored)"
else
	fail client-address "log line: ${logline:-none}"
fi

echo "== master key from the Docker secret"
atrium=$(ctr atrium)
inspect=$(docker inspect "$atrium")
if grep -q "$key" <<<"$inspect"; then
	fail secret "the key is visible in docker inspect"
elif ! grep -q '"ATRIUM_MASTER_KEY_FILE=/run/secrets/atrium_master_key"' <<<"$inspect" || grep -q '"ATRIUM_MASTER_KEY=' <<<"$inspect"; then
	fail secret "docker inspect does not show ATRIUM_MASTER_KEY_FILE alone"
elif docker cp "$atrium:/data/master.key" - >/dev/null 2>&1; then
	fail secret "/data/master.key exists: the key was not taken from the secret"
else
	# That the key in effect is the secret's is checked at the end (wrong-key).
	pass secret "ATRIUM_MASTER_KEY_FILE=/run/secrets/atrium_master_key, the key not in docker inspect, no /data/master.key"
fi

echo "== backup from the running container"
if dc exec -T atrium /atrium backup - > "$tmp/backup.db" 2> "$tmp/backup.err" &&
	[[ $(head -c 15 "$tmp/backup.db") == "SQLite format 3" ]] && grep -aq 'tok20' "$tmp/backup.db"; then
	# atrium restore runs SQLite's integrity check and the schema check on it.
	if out=$(docker run --rm --network none --user 0 -v "$tmp:/backup:ro" "$(docker inspect -f '{{.Image}}' "$atrium")" \
		restore -data /tmp/restored /backup/backup.db 2>&1); then
		pass backup "atrium backup - wrote $(wc -c < "$tmp/backup.db") bytes with the chat's reply; atrium restore accepts it"
	else
		fail backup "atrium restore refused the backup: $out"
	fi
else
	fail backup "$(cat "$tmp/backup.err") ($(wc -c < "$tmp/backup.db") bytes, starts $(head -c 15 "$tmp/backup.db" | od -An -c | head -1))"
fi

echo "== down and up again: the data persists"
if out=$(dc down 2>&1); then
	up up-again
	"$tmp/composesmoke" again -base "$base" -ca "$tmp/root.crt" -state "$tmp/state" | tee "$tmp/again.out"
	failures=$((failures + $(grep -c '^FAIL' "$tmp/again.out")))
else
	fail persist "${compose[*]} down: $out"
fi

echo "== a different key in the secret is refused"
# The key in effect is the secret's: replace it and Atrium must refuse to open the data.
dc stop atrium >/dev/null 2>&1
chmod 0644 "$tmp/secret/atrium_master_key"
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$tmp/secret/atrium_master_key"
chmod 0444 "$tmp/secret/atrium_master_key"
since=$(date +%s)
dc start atrium >/dev/null 2>&1
refused=
for _ in $(seq 1 40); do
	refused=$(docker logs --since "$since" "$(ctr atrium)" 2>&1 | grep 'does not match' | tail -1)
	[[ -n $refused ]] && break
	sleep 0.5
done
if [[ -n $refused ]] && ! curl -fsS --cacert "$tmp/root.crt" -o /dev/null "$base/readyz" 2>/dev/null; then
	pass wrong-key "Atrium refused it: ${refused:0:200}"
else
	fail wrong-key "no refusal in the log (${refused:-nothing}) or /readyz still answers"
fi

finish
