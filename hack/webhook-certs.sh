#!/usr/bin/env bash
# Self-signed certificates for the admission webhook, for local clusters without
# cert-manager. Writes a CA and a serving certificate for the webhook Service into DIR
# (default _output/webhook-certs), and the caBundle to put into
# deploy/webhook/validating-webhook.yaml (ca.bundle).
#
# Run again on the same DIR, it rotates: a new serving certificate and key, signed by the
# CA already in DIR (ca.crt, ca.key), so the caBundle the API server trusts does not change
# and the certificate can reach the webhook Pods whenever it does (kubelet updates the
# mounted Secret within a minute): no admission fails meanwhile. ROTATE_CA=1 makes a new CA
# too and keeps the old one in ca.crt (the bundle trusts both), so that the Pods' old
# certificate stays valid until they have the new one; run the script again without
# ROTATE_CA once they do (a minute after applying), to drop the old CA.
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
# ca.pem is the current CA alone; ca.crt is what the cluster trusts: the current CA, and
# after ROTATE_CA=1 the previous one too.
if [[ -f ca.crt && ! -f ca.pem ]]; then
  openssl x509 -in ca.crt -out ca.pem # a directory from before ca.pem: its ca.crt is one CA
fi
if [[ ! -f ca.key || ! -f ca.pem || -n ${ROTATE_CA:-} ]]; then
  previous=""
  if [[ -n ${ROTATE_CA:-} && -f ca.pem ]]; then
    previous=$(cat ca.pem)
  fi
  openssl req -x509 -newkey rsa:2048 -nodes -days "$days" -subj "/CN=sandbox-pool-webhook-ca" \
    -keyout ca.key -out ca.pem 2>/dev/null
  { cat ca.pem; [[ -z $previous ]] || printf '%s\n' "$previous"; } > ca.crt
else
  cp ca.pem ca.crt
fi
openssl req -newkey rsa:2048 -nodes -subj "/CN=$svc.$ns.svc" -keyout tls.key -out tls.csr 2>/dev/null
printf 'subjectAltName=DNS:%s,DNS:%s.%s,DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local\nextendedKeyUsage=serverAuth\n' \
  "$svc" "$svc" "$ns" "$svc" "$ns" "$svc" "$ns" > san.ext
openssl x509 -req -in tls.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days "$days" \
  -extfile san.ext -out tls.crt 2>/dev/null
base64 -w0 ca.crt > ca.bundle
rm -f tls.csr san.ext ca.srl
echo "wrote $dir/{ca.crt,ca.pem,ca.key,tls.crt,tls.key,ca.bundle}"
