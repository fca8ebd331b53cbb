# pg-tls.sh — sourced by stack.sh. With EFFECTIVELY_PG_TLS=1 a PostgreSQL
# instance starts with ssl=on and accepts TCP connections only over TLS
# (its pg_hba.conf host lines become hostssl; the unix socket stays the
# admin side, trust for the postgres superuser as without TLS). The server's
# certificate, for localhost and 127.0.0.1, is signed by a test CA made here
# at the first start, into the instance's folder — never into the checkout:
#
#   $PG_DIR/tls/ca.pem          the test CA (what a client's sslrootcert names)
#   $PG_DIR/tls/server.crt,.key the server's certificate and key
#
# A client connects with sslmode=verify-full&sslrootcert=$PG_DIR/tls/ca.pem;
# `stack.sh env` prints such a URL.

PG_TLS=${EFFECTIVELY_PG_TLS:-}

pg_tls() {
  case "$PG_TLS" in
    "" | 0) return 1 ;;
    1) return 0 ;;
    *) die "EFFECTIVELY_PG_TLS=$PG_TLS: set it to 1 for a TLS-only PostgreSQL (or unset)" ;;
  esac
}

# pg_tls_material makes the CA and the server certificate once per instance
# folder.
pg_tls_material() {
  local tls=$PG_DIR/tls
  [ -f "$tls/.complete" ] && return
  command -v openssl >/dev/null 2>&1 || die "openssl not found: EFFECTIVELY_PG_TLS=1 makes the server's certificate with it"
  log "making a test CA and the server certificate in $tls"
  rm -rf "$tls"
  mkdir -p "$tls"
  (
    set -e
    cd "$tls"
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 30 -subj "/CN=effectively test PostgreSQL CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -keyout ca.key -out ca.pem
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out server.key
    openssl req -new -key server.key -subj "/CN=localhost" -out server.csr
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=serverAuth" "subjectAltName=DNS:localhost,IP:127.0.0.1" >server.ext
    openssl x509 -req -sha256 -days 30 -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
      -extfile server.ext -out server.crt
    rm -f ./*.csr ./*.ext ./*.srl
  ) >"$PG_DIR/openssl.log" 2>&1 || { tail -20 "$PG_DIR/openssl.log" >&2; die "making the test certificates failed (log: $PG_DIR/openssl.log)"; }
  # The server refuses a key that others can read; it runs as postgres.
  chmod 600 "$tls/server.key" "$tls/ca.key"
  chmod 644 "$tls/ca.pem" "$tls/server.crt"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$tls/server.key" "$tls/server.crt"; fi
  touch "$tls/.complete"
}

# pg_tls_conf turns TLS on in the instance's configuration, once.
pg_tls_conf() {
  local data=$PG_DIR/data tls=$PG_DIR/tls
  grep -q '^# --- EFFECTIVELY_PG_TLS=1' "$data/postgresql.conf" && return
  cat >>"$data/postgresql.conf" <<CONF

# --- EFFECTIVELY_PG_TLS=1 (stack/pg-tls.sh) ---
ssl = on
ssl_cert_file = '$tls/server.crt'
ssl_key_file = '$tls/server.key'
ssl_min_protocol_version = 'TLSv1.2'
CONF
  # TCP only over TLS: a client with sslmode=disable is refused.
  sed -i -e 's/^host\([[:space:]]\)/hostssl\1/' "$data/pg_hba.conf"
}

pg_tls_env_out() {
  echo "export EFFECTIVELY_TEST_POSTGRES_CA='$PG_DIR/tls/ca.pem'"
}

# pg_tls_on reports whether the instance was set up for TLS (by an earlier
# `up` with EFFECTIVELY_PG_TLS=1), so `env` prints the matching URL.
pg_tls_on() { grep -qs '^# --- EFFECTIVELY_PG_TLS=1' "$PG_DIR/data/postgresql.conf"; }
