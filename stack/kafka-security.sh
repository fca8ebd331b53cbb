# kafka-security.sh — sourced by stack.sh. With EFFECTIVELY_KAFKA_SECURITY=sasl_ssl
# a Kafka instance starts with, besides its PLAINTEXT port:
#
#   SASL_SSL on EFFECTIVELY_KAFKA_SASL_SSL_PORT (PLAINTEXT port + 2):
#            PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (Kafka's
#            unsecured-JWT validator: test only)
#   SSL      on EFFECTIVELY_KAFKA_SSL_PORT (PLAINTEXT port + 3): mutual TLS,
#            ssl.client.auth=required, principal = the certificate's CN
#
# and the standard authorizer (allow.everyone.if.no.acl.found=false). The
# PLAINTEXT and CONTROLLER listeners stay on 127.0.0.1 and are the admin
# side: their principal, User:ANONYMOUS, is a super user (so is User:admin),
# which is how a test creates topics and ACLs. Everything secret is made
# here, at the first start, into the instance's folder — never into the
# checkout:
#
#   $KAFKA_DIR/tls/ca.pem, ca.key          the test CA
#   $KAFKA_DIR/tls/broker.pem              broker key + certificate (PEM keystore)
#   $KAFKA_DIR/tls/worker.pem, worker.key  client certificate CN=worker (mTLS)
#   $KAFKA_DIR/secrets/admin.password, worker.password
#                                          SASL users admin and worker (PLAIN
#                                          and both SCRAMs, same password)

KAFKA_SECURITY=${EFFECTIVELY_KAFKA_SECURITY:-}
KAFKA_SASL_SSL_PORT=${EFFECTIVELY_KAFKA_SASL_SSL_PORT:-$((KAFKA_PORT + 2))}
KAFKA_SSL_PORT=${EFFECTIVELY_KAFKA_SSL_PORT:-$((KAFKA_PORT + 3))}

kafka_secure() {
  case "$KAFKA_SECURITY" in
    "") return 1 ;;
    sasl_ssl) return 0 ;;
    *) die "EFFECTIVELY_KAFKA_SECURITY=$KAFKA_SECURITY: the only mode is sasl_ssl (or unset for PLAINTEXT only)" ;;
  esac
}

# secure_material makes the CA, the certificates and the passwords once per
# instance folder.
secure_material() {
  local tls=$KAFKA_DIR/tls sec=$KAFKA_DIR/secrets
  [ -f "$tls/.complete" ] && [ -f "$sec/worker.password" ] && return
  command -v openssl >/dev/null 2>&1 || die "openssl not found: EFFECTIVELY_KAFKA_SECURITY=sasl_ssl makes its certificates with it"
  log "making a test CA, broker and client certificates in $tls"
  rm -rf "$tls" "$sec"
  mkdir -p "$tls" "$sec"
  chmod 700 "$sec"
  (
    set -e
    cd "$tls"
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 30 -subj "/CN=effectively test CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -keyout ca.key -out ca.pem
    issue() { # issue NAME CN EXTENDED-KEY-USAGE [SAN]
      openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1.key"
      openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
      {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$3"
        [ -n "${4:-}" ] && echo "subjectAltName=$4"
      } >"$1.ext"
      openssl x509 -req -sha256 -days 30 -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
        -extfile "$1.ext" -out "$1.crt"
      cat "$1.crt" >"$1.pem"
    }
    issue broker localhost serverAuth,clientAuth "DNS:localhost,IP:127.0.0.1"
    issue worker worker clientAuth
    # Kafka's PEM keystore: the (unencrypted PKCS#8) key, then the chain.
    cat broker.key broker.crt ca.pem >broker.pem
    rm -f ./*.csr ./*.ext ./*.srl
  ) >"$KAFKA_DIR/openssl.log" 2>&1 || { tail -20 "$KAFKA_DIR/openssl.log" >&2; die "making the test certificates failed (log: $KAFKA_DIR/openssl.log)"; }
  local u
  for u in admin worker; do
    (umask 077; openssl rand -hex 16 >"$sec/$u.password")
  done
  touch "$tls/.complete"
}

# secure_properties rewrites the instance's server.properties for the
# secured listeners.
secure_properties() {
  local props=$KAFKA_DIR/server.properties tls=$KAFKA_DIR/tls
  local admin_pw worker_pw
  admin_pw=$(cat "$KAFKA_DIR/secrets/admin.password")
  worker_pw=$(cat "$KAFKA_DIR/secrets/worker.password")
  local listeners="PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_SSL_PORT,SSL://127.0.0.1:$KAFKA_SSL_PORT"
  sed -i -e "s|^listeners=.*|listeners=$listeners|" -e "s|^advertised.listeners=.*|advertised.listeners=$listeners|" \
    -e "s|^listener.security.protocol.map=.*|listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL|" "$props"
  cat >>"$props" <<PROPS

# --- EFFECTIVELY_KAFKA_SECURITY=sasl_ssl (stack/kafka-security.sh) ---
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
# The PLAINTEXT and CONTROLLER listeners (127.0.0.1 only) are the admin side.
super.users=User:ANONYMOUS;User:admin

ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
ssl.endpoint.identification.algorithm=https
listener.name.ssl.ssl.client.auth=required
# mTLS principal: the certificate's CN (CN=worker is User:worker).
ssl.principal.mapping.rules=RULE:^CN=([^,]+).*\$/\$1/,DEFAULT

sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="$admin_pw" user_worker="$worker_pw";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
# OAUTHBEARER with Kafka's unsecured-JWT validator (alg none, principal from
# sub): enough to test a token read from a file, not for production.
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";
PROPS
}

# secure_format_args are the StorageTool arguments that create the SCRAM
# users when the storage is formatted.
secure_format_args() {
  local u pw m
  for u in admin worker; do
    pw=$(cat "$KAFKA_DIR/secrets/$u.password")
    for m in SCRAM-SHA-256 SCRAM-SHA-512; do
      printf '%s\n' --add-scram "$m=[name=$u,password=$pw]"
    done
  done
}

secure_env_out() {
  echo "export EFFECTIVELY_TEST_KAFKA_SASL_SSL_BROKERS='127.0.0.1:$KAFKA_SASL_SSL_PORT'"
  echo "export EFFECTIVELY_TEST_KAFKA_SSL_BROKERS='127.0.0.1:$KAFKA_SSL_PORT'"
  echo "export EFFECTIVELY_TEST_KAFKA_SECURITY_DIR='$KAFKA_DIR'"
}
