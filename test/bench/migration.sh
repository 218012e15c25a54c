#!/usr/bin/env bash
# Total time of real live migrations between the test bed's nodes through
# Ferry's proxy (mTLS and plain) against the bed's socat relays, and Ferry's
# direct path (QEMU's own TLS) against QEMU straight to QEMU in the clear,
# alternating so the machine's moods spread over all of them. Prints
# medians and ratios.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}
TB=bin/testbed
make -s build
trap '$TB down >/dev/null 2>&1 || true' EXIT
$TB up --ferryd bin/ferryd >/dev/null
$TB guest start bench --node a --memory-mib 512 --dirty-mib 256 --dirty-rate-mibs 32 >/dev/null

declare -A times
from=a; to=b
run() { # relay label [migrate flags]
  local t0 t1
  t0=$(date +%s%N)
  $TB migrate bench --from $from --to $to --via "$1" "${@:3}" >/dev/null 2>&1
  t1=$(date +%s%N)
  times[$2]+="$(( (t1 - t0) / 1000000 )) "
  local x=$from; from=$to; to=$x
}
for i in $(seq "$ROUNDS"); do
  $TB proxy-tls on >/dev/null;  run ferry ferry-mtls
  run ferry ferry-direct --data-path direct
  run raw raw
  run socat socat
  $TB proxy-tls off >/dev/null; run ferry ferry-plain
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
s=$(echo "${times[socat]}" | median)
echo "real migrations, 512 MiB guest dirtying 256 MiB at 32 MiB/s, median of $ROUNDS (wall ms, incl. the migrate call)"
printf '%-12s %8s %8s\n' relay ms "x socat"
for k in socat ferry-plain ferry-mtls; do
  m=$(echo "${times[$k]}" | median)
  printf "%-12s %8d %8.2f   (%s)\n" "$k" "$m" "$(awk -v m="$m" -v s="$s" 'BEGIN{print m/s}')" "${times[$k]}"
done
# The direct path against QEMU straight to QEMU in the clear: what QEMU's
# own TLS costs, with no relay at all. Speed is the inverse of time.
r=$(echo "${times[raw]}" | median)
printf '\n%-12s %8s %8s\n' path ms "x raw speed"
for k in raw ferry-direct; do
  m=$(echo "${times[$k]}" | median)
  printf "%-12s %8d %8.2f   (%s)\n" "$k" "$m" "$(awk -v m="$m" -v r="$r" 'BEGIN{print r/m}')" "${times[$k]}"
done
