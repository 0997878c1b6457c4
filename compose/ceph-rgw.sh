#!/usr/bin/env bash
# The S3 store of docker-compose.yaml: Ceph's RADOS Gateway on a one-node Ceph cluster, in
# the official Ceph image (quay.io/ceph/ceph). DEVELOPMENT ONLY: one monitor, one OSD, one
# copy of every object, no authentication between the daemons (they listen on 127.0.0.1 of
# the container; only the gateway's port is published).
#
# First start: the cluster (its monitor, and its OSD on BlueStore in a sparse file), all under
# $RGW_STATE_DIR (the `rgw-data` volume). Every start: the daemons, the gateway on :$RGW_PORT,
# the user the Airflow tasks use (created, or its secret set to $RECFORGE_S3_SECRET_KEY: how
# a secret is rotated) and the buckets of $RECFORGE_BUCKETS (comma-separated; missing ones
# created); then the file `ready`, which the health check waits for. SIGTERM (docker compose
# stop) stops the daemons cleanly.
#
# Ceph RGW decides PutObject's If-None-Match: * and If-Match on the server, which publishing
# needs (recforge.storage.guarantees). tests/dev/test_compose_rgw.py runs this script with the
# Ceph packages of the test machine.
set -euo pipefail

D=${RGW_STATE_DIR:-/var/lib/recforge-rgw}
RGW_PORT=${RGW_PORT:-7480}
MON_PORT=${RGW_MON_PORT:-3300}
RGW_BIND=${RGW_BIND:-0.0.0.0}
OSD_SIZE=${RGW_OSD_SIZE:-21474836480}  # bytes of the OSD's sparse file (20 GiB)
AK=${RECFORGE_S3_ACCESS_KEY:?set RECFORGE_S3_ACCESS_KEY}
SK=${RECFORGE_S3_SECRET_KEY:?set RECFORGE_S3_SECRET_KEY}
BUCKETS=${RECFORGE_BUCKETS:-}
CONF=$D/ceph.conf
ENDPOINT=http://127.0.0.1:$RGW_PORT

say() { echo "recforge-rgw: $*"; }
ceph_() { "$1" -c "$CONF" "${@:2}"; }

write_conf() {
  cat > "$CONF" <<CONF
[global]
fsid = $1
mon_host = v2:127.0.0.1:$MON_PORT
public_addr = 127.0.0.1
ms_bind_ipv6 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
auth_allow_insecure_global_id_reclaim = true
mon_warn_on_insecure_global_id_reclaim_allowed = false
ms_mon_client_mode = crc
ms_client_mode = crc
ms_mon_service_mode = crc
ms_mon_cluster_mode = crc
ms_service_mode = crc
ms_cluster_mode = crc
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
run_dir = $D/run
admin_socket = $D/run/\$name.asok
pid_file = $D/run/\$name.pid
log_file = $D/log/\$name.log
keyring = $D/keyring

[mon]
mon_data = $D/mon/\$name

[osd]
osd_data = $D/osd/\$name
osd_objectstore = bluestore
bluestore_block_create = true
bluestore_block_size = $OSD_SIZE
bluestore_fsck_on_mkfs = false
osd_memory_target = 1073741824

[client.rgw]
rgw_frontends = beast endpoint=$RGW_BIND:$RGW_PORT
rgw_thread_pool_size = 64
rgw_enable_usage_log = false
CONF
}

wait_for() {  # what, seconds, test command...
  local what=$1 limit=$2 i=0
  shift 2
  until "$@" >/dev/null 2>&1; do
    i=$((i + 1))
    if [ "$i" -gt "$((limit * 2))" ]; then
      say "$what did not come up in $limit s"; tail -n 20 "$D"/log/*.log >&2 || true; exit 1
    fi
    sleep 0.5
  done
}

stop_daemons() {  # each daemon in turn, waiting up to 20 s for it to exit
  local name pid i
  rm -f "$D/ready"
  for name in client.rgw osd.0 mon.a; do
    [ -f "$D/run/$name.pid" ] || continue
    pid=$(cat "$D/run/$name.pid")
    kill "$pid" 2>/dev/null || continue
    for i in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  done
}

osd_up() { ceph_ ceph osd stat -f json | grep -q '"num_up_osds":1'; }
answers() { curl -s -o /dev/null "$ENDPOINT/"; }
EMPTY_SHA256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
signed() {  # a body-less S3 request as the tasks' user (SigV4; RGW wants the payload hash)
  curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$AK:$SK" -H "x-amz-content-sha256: $EMPTY_SHA256" "$@"
}

rm -f "$D/ready"
mkdir -p "$D/run" "$D/log" "$D/mon" "$D/osd"
touch "$D/keyring"
trap stop_daemons EXIT  # a failed start leaves no daemon behind
trap 'say stopping; exit 0' TERM INT
if [ ! -f "$CONF" ]; then
  say "first start: creating the cluster under $D"
  fsid=$(cat /proc/sys/kernel/random/uuid)
  write_conf "$fsid"
  monmaptool --create --clobber --fsid "$fsid" --addv a "[v2:127.0.0.1:$MON_PORT]" \
    "$D/monmap" >/dev/null
  ceph_ ceph-mon --id a --mkfs --monmap "$D/monmap"
fi
ceph_ ceph-mon --id a
if [ ! -f "$D/osd/osd.0/ready" ]; then
  rm -rf "$D/osd/osd.0" && mkdir -p "$D/osd/osd.0"
  osd_uuid=$(cat /proc/sys/kernel/random/uuid)
  ceph_ ceph osd new "$osd_uuid" >/dev/null
  ceph_ ceph-osd --id 0 --mkfs --osd-uuid "$osd_uuid"
fi
ceph_ ceph-osd --id 0
wait_for "osd.0" 120 osd_up
ceph_ radosgw --name client.rgw
wait_for "the gateway" 120 answers
if ceph_ radosgw-admin user info --uid recforge >/dev/null 2>&1; then
  ceph_ radosgw-admin key create --uid recforge --key-type s3 --access-key "$AK" \
    --secret-key "$SK" >/dev/null
else
  ceph_ radosgw-admin user create --uid recforge --display-name "recforge tasks" \
    --access-key "$AK" --secret-key "$SK" >/dev/null
fi
for bucket in $(echo "$BUCKETS" | tr ',' ' '); do
  if [ "$(signed -I "$ENDPOINT/$bucket")" != 200 ]; then
    code=$(signed -X PUT "$ENDPOINT/$bucket")
    [ "$code" = 200 ] || { say "creating bucket $bucket failed: HTTP $code"; exit 1; }
  fi
done
touch "$D/ready"
say "ready: $ENDPOINT, buckets [$BUCKETS], user $AK"
while kill -0 "$(cat "$D/run/client.rgw.pid")" 2>/dev/null; do sleep 2 & wait $!; done
say "the gateway exited"; tail -n 20 "$D/log/client.rgw.log" >&2 || true
exit 1
