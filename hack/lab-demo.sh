#!/usr/bin/env bash
# The README's first command (`make lab`): bring the lab up and show the
# Multi-Cluster Services story. c1 and c2 use the same pod and service
# CIDRs; globalnet makes both reachable. whereami is exported from c1, then
# from c2 too, and a pod of c3 (and one of c2) reaches it by its clusterset
# VIP and name, answered by both clusters, through the gateways' WireGuard
# tunnels.
set -euo pipefail
lab=${CAUSEWAY_LAB:-bin/causeway-lab}
ctl=${CAUSEWAYCTL:-bin/causewayctl}

$lab up
# causewayctl talks to the lab's clusters like to any: through a kubeconfig.
KUBECONFIG=$($lab kubeconfig)
export KUBECONFIG
echo
echo "=== c3 asks for whereami.demo.svc.clusterset.local before anyone exported it"
$lab exec c3/demo/client -- curl -s -m 3 http://whereami.demo.svc.clusterset.local \
  || echo "(no answer: nothing is shared until a cluster opts in)"

echo
echo "=== c1 exports demo/whereami (a ServiceExport)"
$ctl export demo/whereami --cluster c1
vip=""
for _ in $(seq 1 100); do
  vip=$($lab kubectl c3 -- get serviceimports.multicluster.x-k8s.io -n demo whereami \
        -o jsonpath='{.spec.ips[0]}' 2>/dev/null || true)
  [ -n "$vip" ] && break
  sleep 0.1
done
[ -n "$vip" ] || { echo "no ServiceImport in c3"; exit 1; }
echo "c3 now has ServiceImport demo/whereami with clusterset VIP $vip"

# curl_until FROM URL CLUSTERS...: curls URL from FROM's client pod until
# every one of CLUSTERS has answered (bounded), printing each answer.
curl_until() {
  local from=$1 url=$2; shift 2
  local want=("$@") seen="" out
  for _ in $(seq 1 60); do
    if out=$($lab exec "$from/demo/client" -- curl -s -m 3 "$url"); then
      echo "  $from: curl $url -> $out"
      for c in "${want[@]}"; do
        [[ "$out" == *"\"cluster\":\"$c\""* && "$seen" != *"$c"* ]] && seen="$seen $c"
      done
      local all=1
      for c in "${want[@]}"; do [[ "$seen" == *"$c"* ]] || all=0; done
      [ "$all" = 1 ] && return 0
    fi
    sleep 0.3
  done
  echo "cross-cluster traffic did not work: $url from $from never answered by all of ${want[*]} (see: $lab status, $ctl diagnose)"
  return 1
}

echo
echo "=== from c3: curl $vip and curl whereami.demo.svc.clusterset.local (answered by c1)"
curl_until c3 "http://$vip" c1
curl_until c3 http://whereami.demo.svc.clusterset.local c1

echo
echo "=== c2 (same pod and service CIDRs as c1) exports demo/whereami too"
$ctl export demo/whereami --cluster c2
echo "=== from c3 and from c2: one name, one VIP, answered by both clusters"
curl_until c3 http://whereami.demo.svc.clusterset.local c1 c2
curl_until c2 "http://$vip" c1 c2
echo
echo "(\"client\" is the address the server saw: the caller's global address,"
echo " since c1 and c2 overlap; \`$ctl show exports\` lists the global IP:port pairs)"
echo
$ctl show imports
