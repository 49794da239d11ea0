#!/bin/sh
# Makes the TLS material of the docker set-up in docker/tls/: a self-signed CA and the broker's
# certificate for the host name `mosquitto` (the compose service), valid for 825 days.
#   cd docker && sh make-certs.sh
# The CA's key stays in docker/tls/ca.key: keep it off the broker and out of version control.
set -eu
cd "$(dirname "$0")"
mkdir -p tls
cd tls
openssl req -x509 -newkey rsa:3072 -nodes -days 825 -subj "/CN=coutil test CA" -keyout ca.key -out ca.crt
openssl req -newkey rsa:3072 -nodes -subj "/CN=mosquitto" -keyout broker.key -out broker.csr
printf 'subjectAltName=DNS:mosquitto,DNS:localhost,IP:127.0.0.1\n' > broker.ext
openssl x509 -req -in broker.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 825 -extfile broker.ext \
    -out broker.crt
rm -f broker.csr broker.ext ca.srl
chmod 0644 ca.crt broker.crt
chmod 0640 broker.key
echo "made $(pwd)/ca.crt, broker.crt, broker.key"
