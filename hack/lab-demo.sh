#!/usr/bin/env bash
# The README's first command (`make lab`): bring the lab up and show the
# Multi-Cluster Services story — a Service of c1 reached from a pod of c3
# by its clusterset name and VIP, through the gateways' WireGuard tunnel.
set -euo pipefail
ctl=${CAUSEWAYCTL:-bin/causewayctl}

$ctl lab up
echo
echo "=== c3 asks for whereami.demo.svc.clusterset.local before anyone exported it"
$ctl lab exec c3/demo/client -- curl -s -m 3 http://whereami.demo.svc.clusterset.local \
  || echo "(no answer: nothing is shared until a cluster opts in)"

echo
echo "=== c1 exports demo/whereami (a ServiceExport)"
$ctl export demo/whereami --cluster c1
vip=""
for _ in $(seq 1 100); do
  vip=$($ctl lab kubectl c3 -- get serviceimports.multicluster.x-k8s.io -n demo whereami \
        -o jsonpath='{.spec.ips[0]}' 2>/dev/null || true)
  [ -n "$vip" ] && break
  sleep 0.1
done
[ -n "$vip" ] || { echo "no ServiceImport in c3"; exit 1; }
echo "c3 now has ServiceImport demo/whereami with clusterset VIP $vip"

echo
echo "=== from c3: curl $vip and curl whereami.demo.svc.clusterset.local"
ok=0
for url in "http://$vip" http://whereami.demo.svc.clusterset.local http://whereami.demo.svc.clusterset.local; do
  for _ in $(seq 1 30); do
    if out=$($ctl lab exec c3/demo/client -- curl -s -m 3 "$url"); then
      echo "$url -> $out"; ok=$((ok + 1)); break
    fi
    sleep 0.5
  done
done
[ "$ok" = 3 ] || { echo "cross-cluster traffic did not work (see: $ctl lab status)"; exit 1; }
echo
$ctl show imports
