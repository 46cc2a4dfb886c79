#!/usr/bin/env bash
# Rewrites link/hot-symbols.txt: the functions of the release `flower` binary that a
# one-turn `flower once` (in a new directory and in one with sessions.db), a resume of
# a 100-turn session with one and with 20 more `Read` turns, and `flower --version`
# execute, as the linker names them. build.rs hands the list to
# LLD (`--symbol-ordering-file`), which puts those functions together at the start
# of the code, so a short run maps a few MiB of code instead of most of it.
# Names are mangled and depend on the `flower` crate's build hash, which differs between
# `cargo build --release` (what the README builds) and `cargo bench` (the dev-dependencies
# are in its graph): each part is recorded from both binaries and the names of both kept
# (LLD skips the names a binary does not have).
# Needs valgrind (callgrind); with FLOWER_TEST_POSTGRES_URL set (see .ci/postgres.sh) it
# also covers the PostgreSQL store. Run from the repository root, then rebuild:
#   link/hot-symbols.sh && cargo build --release
set -euo pipefail
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The binary `cargo build --release` makes (cargo names its file; target/release/flower
# is whichever profile built last).
release="$out/flower-release"
cargo build --release --bin flower --message-format=json |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | xargs -I{} cp {} "$release"
mkdir "$out/one" "$out/resume"
# Each part's runs under callgrind (names left mangled), into a directory of its own:
# the one-turn part first, so that its functions lie together at the very start.
# `record BIN`: the one-turn runs, `--version` and the session-length bench's resume and
# live turns of that binary (SQLite, and PostgreSQL when FLOWER_TEST_POSTGRES_URL names a
# server: its append connection and resume are laid out with the rest); an empty BIN is
# the bench's own build.
record() {
    local tag=$1 bin=$2
    env ${bin:+FLOWER_BENCH_BIN=$bin} \
        FLOWER_BENCH_WRAP="valgrind --tool=callgrind --demangle=no --callgrind-out-file=$out/one/cg.$tag.%p" \
        cargo bench --bench engine -- one > /dev/null
    valgrind --tool=callgrind --demangle=no --callgrind-out-file="$out/one/cg.$tag.version" \
        "${bin:-target/release/flower}" --version > /dev/null 2>&1
    env ${bin:+FLOWER_BENCH_BIN=$bin} \
        FLOWER_BENCH_WRAP="valgrind --tool=callgrind --demangle=no --callgrind-out-file=$out/resume/cg.$tag.%p" \
        cargo bench --bench session_length -- 100 > /dev/null
}
record release "$release"
record bench ""
# Every function callgrind saw, kept when it is a code symbol of either binary: the
# one-turn part's, then those only the resume ran.
executed() { sed -n 's/^c\{0,1\}fn=([0-9]*) //p' "$out/$1"/cg.* | sort -u; }
nm "$release" target/release/flower 2>/dev/null | awk '$2 ~ /^[tTwW]$/ { print $3 }' | sort -u > "$out/code"
executed one | comm -12 - "$out/code" > "$out/first"
executed resume | comm -12 - "$out/code" | comm -23 - "$out/first" > "$out/then"
cat "$out/first" "$out/then" > link/hot-symbols.txt
wc -l "$out/first" "$out/then"
