#!/usr/bin/env bash
# Make a Go toolchain >= GO_MIN available and print the directory of its `go` binary (stdout; progress on stderr).
#
# The lab builds upstream's programs (Kubernetes, the scheduler, CoreDNS, the Pulumi engine) from their Go
# modules, so it needs a recent Go; skyrack itself is Python. In order:
#   1. the machine's own `go`, if it is GO_MIN or newer;
#   2. a toolchain this script installed before: $TOOLS_CACHE/go-$GO_TOOLCHAIN;
#   3. otherwise it installs that one: Go's own toolchain module (golang.org/toolchain, the module Go's
#      GOTOOLCHAIN switch downloads, served by the Go module proxy and checked against the checksum
#      database), fetched with whatever `go` there is, Debian's golang-go package if there is none.
# Idempotent; safe to run again. Used by ./dev.
set -euo pipefail

GO_MIN=${GO_MIN:-1.26.6}            # the Pulumi engine (pkg/v3 3.260.0) needs it
GO_TOOLCHAIN=${GO_TOOLCHAIN:-1.26.8}  # what is installed when the machine's Go is missing or older
TOOLS_CACHE=${TOOLS_CACHE:-${SKYRACK_TOOLS_CACHE:-${SKYRACK_CACHE:-/var/cache/skyrack}/tools}}

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
at_least() { [[ $(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1) == "$2" ]]; }  # $1 >= $2
go_version() { "$1" env GOVERSION 2>/dev/null | sed 's/^go//'; }

if command -v go >/dev/null; then
    have=$(go_version go)
    if [[ -n $have ]] && at_least "$have" "$GO_MIN"; then
        dirname "$(command -v go)"
        exit 0
    fi
fi

dir=$TOOLS_CACHE/go-$GO_TOOLCHAIN
if [[ -x $dir/bin/go ]] && [[ $(go_version "$dir/bin/go") == "$GO_TOOLCHAIN" ]]; then
    echo "$dir/bin"
    exit 0
fi

if ! command -v go >/dev/null; then
    log "no Go on this machine: installing Debian's golang-go, only to fetch Go $GO_TOOLCHAIN with it"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends golang-go ca-certificates >/dev/null
fi
log "Go ${have:-(none)} is older than $GO_MIN: installing Go $GO_TOOLCHAIN (the golang.org/toolchain module) into $dir"
case $(uname -m) in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) log "no Go toolchain module for $(uname -m)"; exit 1 ;;
esac
module=golang.org/toolchain@v0.0.1-go$GO_TOOLCHAIN.linux-$arch
mkdir -p "$TOOLS_CACHE"
work=$(mktemp -d "$TOOLS_CACHE/go-$GO_TOOLCHAIN.partial-XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
# outside any module, with a scratch module cache: only the toolchain's zip is fetched
(cd "$work" && env -u GOFLAGS GOMODCACHE="$work/mod" GOPATH="$work/path" GOTOOLCHAIN=local \
    go mod download "$module" >&2)
src=$work/mod/$module
[[ -f $src/bin/go ]] || { log "$module has no bin/go"; exit 1; }
cp -a "$src" "$work/go"
chmod -R u+w "$work/go"
# a module zip keeps no file modes: make the programs executable, as Go's own toolchain switch does
chmod +x "$work"/go/bin/* "$work"/go/pkg/tool/*/*
got=$(go_version "$work/go/bin/go")
[[ $got == "$GO_TOOLCHAIN" ]] || { log "the installed toolchain reports Go $got, not $GO_TOOLCHAIN"; exit 1; }
rm -rf "$dir"
mv "$work/go" "$dir"
log "Go $GO_TOOLCHAIN installed in $dir"
echo "$dir/bin"
