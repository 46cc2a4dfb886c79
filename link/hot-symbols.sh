#!/usr/bin/env bash
# Rewrites link/hot-symbols.txt: the functions of the release `flower` binary that a
# one-turn `flower once` (in a new directory and in one with sessions.db), a resume of
# a 100-turn session with one and with 20 more `Read` turns, and `flower --version`
# execute, as the linker names them. build.rs hands the list to
# LLD (`--symbol-ordering-file`), which puts those functions together at the start
# of the code, so a short run maps a few MiB of code instead of most of it.
# Needs valgrind (callgrind). Run from the repository root, then rebuild:
#   link/hot-symbols.sh && cargo build --release
set -euo pipefail
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build --release --bin flower
bin=target/release/flower
# The engine bench's one-turn part, each run under callgrind (names left mangled).
FLOWER_BENCH_WRAP="valgrind --tool=callgrind --demangle=no --callgrind-out-file=$out/cg.%p" \
    cargo bench --bench engine -- one > /dev/null
# The session-length bench's resume and live turns (SQLite), likewise.
env -u FLOWER_TEST_POSTGRES_URL \
    FLOWER_BENCH_WRAP="valgrind --tool=callgrind --demangle=no --callgrind-out-file=$out/cg.%p" \
    cargo bench --bench session_length -- 100 > /dev/null
valgrind --tool=callgrind --demangle=no --callgrind-out-file="$out/cg.version" \
    "$bin" --version > /dev/null 2>&1
# Every function callgrind saw, kept when it is a code symbol of the binary.
sed -n 's/^c\{0,1\}fn=([0-9]*) //p' "$out"/cg.* | sort -u > "$out/executed"
nm "$bin" | awk '$2 ~ /^[tTwW]$/ { print $3 }' | sort -u > "$out/code"
comm -12 "$out/executed" "$out/code" > link/hot-symbols.txt
wc -l link/hot-symbols.txt
