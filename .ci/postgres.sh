#!/usr/bin/env bash
# Sourced by .ci/run: a throwaway PostgreSQL cluster for the tests that need one.
# Installs PostgreSQL from the distribution's packages when missing, runs the server as
# an unprivileged user in a temp directory on a free loopback port, exports its URL as
# FLOWER_TEST_POSTGRES_URL and stops it (and removes the directory) when the shell exits.
# Any failure leaves the variable unset: those tests then skip and say why.

flower_pg_start() {
    local bindir
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            echo "postgres.sh: installing PostgreSQL from the distribution's packages"
            apt-get update -qq &&
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null ||
                { echo "postgres.sh: could not install PostgreSQL"; return 1; }
            bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
        fi
    fi
    if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
        echo "postgres.sh: no PostgreSQL found; the PostgreSQL tests will skip"
        return 1
    fi
    # The server refuses to run as root: run it as an unprivileged user.
    local user=""
    local -a as=()
    if [ "$(id -u)" = 0 ]; then
        user=flowerpg
        id -u "$user" >/dev/null 2>&1 ||
            useradd --system --no-create-home --shell /usr/sbin/nologin "$user" ||
            { echo "postgres.sh: cannot create the user $user"; return 1; }
        as=(runuser -u "$user" --)
    fi
    FLOWER_PG_DIR=$(mktemp -d /tmp/flower-pg.XXXXXX)
    chmod 755 "$FLOWER_PG_DIR"
    [ -n "$user" ] && chown "$user" "$FLOWER_PG_DIR"
    # A free loopback port: ask the kernel for one.
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
        echo $((20000 + RANDOM % 20000)))
    "${as[@]}" "$bindir/initdb" -D "$FLOWER_PG_DIR/data" -U flower --auth=trust \
        --encoding=UTF8 --no-locale >"$FLOWER_PG_DIR/initdb.log" 2>&1 ||
        { echo "postgres.sh: initdb failed:"; cat "$FLOWER_PG_DIR/initdb.log"; return 1; }
    FLOWER_PG_CTL=("${as[@]}" "$bindir/pg_ctl" -D "$FLOWER_PG_DIR/data")
    "${FLOWER_PG_CTL[@]}" -w -l "$FLOWER_PG_DIR/server.log" \
        -o "-k $FLOWER_PG_DIR -p $port -h 127.0.0.1 -c fsync=on" start >/dev/null ||
        { echo "postgres.sh: the server did not start:"; cat "$FLOWER_PG_DIR/server.log"; return 1; }
    "${as[@]}" "$bindir/createdb" -h 127.0.0.1 -p "$port" -U flower flower_test ||
        { echo "postgres.sh: createdb failed"; return 1; }
    export FLOWER_TEST_POSTGRES_URL="postgres://flower@127.0.0.1:$port/flower_test"
    echo "postgres.sh: PostgreSQL ($("$bindir/postgres" --version)) at $FLOWER_TEST_POSTGRES_URL"
}

flower_pg_stop() {
    if [ -n "${FLOWER_PG_DIR:-}" ]; then
        "${FLOWER_PG_CTL[@]}" -m immediate stop >/dev/null 2>&1 || true
        rm -rf "$FLOWER_PG_DIR"
    fi
}

trap flower_pg_stop EXIT
flower_pg_start || unset FLOWER_TEST_POSTGRES_URL
