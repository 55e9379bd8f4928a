#!/usr/bin/env bash
# Self-signed certificates for the admission webhook, for local clusters without
# cert-manager. Writes a CA and a serving certificate for the webhook Service into DIR
# (default _output/webhook-certs), and the caBundle to put into
# deploy/webhook/validating-webhook.yaml (ca.bundle).
#
# With kustomize, write them where the self-signed component reads them and apply the base
# with that component (docs/operator-guide.md, "Install"):
#
#   hack/webhook-certs.sh deploy/overlays/self-signed/certs
#
# Or by hand, after `kubectl apply -k deploy/`:
#
#   hack/webhook-certs.sh _output/certs
#   kubectl -n sandbox-pool-system create secret tls sandbox-pool-webhook-cert \
#     --cert=_output/certs/tls.crt --key=_output/certs/tls.key
#   kubectl patch validatingwebhookconfiguration sandbox-pool-validating-webhook --type=json \
#     -p "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$(cat _output/certs/ca.bundle)\"}]"
set -euo pipefail
dir=${1:-_output/webhook-certs}
svc=${SERVICE:-sandbox-pool-webhook}
ns=${NAMESPACE:-sandbox-pool-system}
days=${DAYS:-365}
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -days "$days" -subj "/CN=sandbox-pool-webhook-ca" \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=$svc.$ns.svc" -keyout tls.key -out tls.csr 2>/dev/null
printf 'subjectAltName=DNS:%s,DNS:%s.%s,DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local\nextendedKeyUsage=serverAuth\n' \
  "$svc" "$svc" "$ns" "$svc" "$ns" "$svc" "$ns" > san.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
  -extfile san.ext -out tls.crt 2>/dev/null
base64 -w0 ca.crt > ca.bundle
rm -f tls.csr san.ext ca.srl
echo "wrote $dir/{ca.crt,ca.key,tls.crt,tls.key,ca.bundle}"
