#!/usr/bin/env bash
# Runs spin over the delivery models: `check.sh model` (the properties) or `check.sh mutants`
# (one guard removed at a time). Every search is exhaustive (no BITSTATE); -DCOLLAPSE only
# compresses the states of safety searches (lossless). Exit status 1 when a result is not the expected one.
set -uo pipefail
cd "$(dirname "$0")"
command -v spin >/dev/null || { echo "spin not found (Debian package spin)"; exit 2; }
MEMLIM=${MODEL_MEMLIM:-2048}   # MB per search
TIMEOUT=${MODEL_TIMEOUT:-600}  # s per search
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bad=0

# run NAME MODEL "DEFINES" MODE EXPECT [SHOW]
#   MODE: safety (assertions, invalid end states) | p1 | p2 (LTL under weak fairness)
#   EXPECT: holds | violated | report (mutants of the last two guards: print the outcome)
run() {
  local name=$1 model=$2 defs=$3 mode=$4 expect=$5 show=${6:-}
  local dir="$work/$name"
  mkdir -p "$dir" && cp "$model" "$dir/" && cd "$dir" || exit 2
  spin -a $defs "$model" >/dev/null 2>spin.err || { echo "$name: spin -a failed"; cat spin.err; bad=1; cd - >/dev/null; return; }
  local cflags="-O2 -w -DMEMLIM=$MEMLIM -DCOLLAPSE" pflags="-m400000"
  case $mode in
    safety) cflags="$cflags -DSAFETY -DNOCLAIM" ;;
    p1|p2)  cflags="-O2 -w -DMEMLIM=$((MEMLIM * 2)) -DNFAIR=3"; pflags="$pflags -a -f -N $mode" ;;
  esac
  gcc $cflags -o pan pan.c 2>gcc.err || { echo "$name: gcc failed"; cat gcc.err; bad=1; cd - >/dev/null; return; }
  local t0=$SECONDS
  timeout "$TIMEOUT" ./pan $pflags >pan.out 2>&1
  local secs=$((SECONDS - t0))
  local errors states depth result what
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.out | head -1)
  states=$(awk '/states, stored/ {print $1; exit}' pan.out)
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' pan.out | head -1)
  if grep -q "Search not completed\|reached -DMEMLIM" pan.out && [ "${errors:-0}" = 0 ]; then
    result="INCOMPLETE"
  elif [ -z "$errors" ]; then
    result="NO RESULT"
  elif [ "$errors" = 0 ]; then
    result="holds"
  else
    result="violated"
  fi
  what=$(grep -m1 -o "assertion violated.*\|acceptance cycle.*" pan.out || true)
  printf '%-44s %-9s states %10s  depth %4s  %4ss  %s\n' "$name" "$result" "${states:-?}" "${depth:-?}" "$secs" "$what"
  case $expect in
    holds)    [ "$result" = holds ] || bad=1 ;;
    violated) [ "$result" = violated ] || bad=1 ;;
    report)   [ "$result" = holds ] || [ "$result" = violated ] || bad=1 ;;
  esac
  if [ "$result" = violated ] && [ -n "$show" ]; then
    spin -t -p $defs "$model" 2>/dev/null | python3 "$OLDPWD/trail.py" | sed 's/^/      /'
  fi
  cd - >/dev/null
}

L=lifecycle.pml
O=outbox.pml
case ${1:-model} in
model)
  echo "property                                     result    (exhaustive; time in seconds)"
  run "5     outbox: marked only after its job added" $O "" safety holds
  run "1     outbox: every event dispatched/dead"     $O "" p1 holds
  run "3     publication, gateway honours key"        $L "-DTASK=0 -DHONOUR=1" safety holds
  run "3     AI task, provider honours key"           $L "-DTASK=1 -DHONOUR=1" safety holds
  run "4     publication, ignores key, TO<=lock"      $L "-DTASK=0 -DHONOUR=0 -DSTRICT=1" safety holds
  run "4     AI task, ignores key, TO<=lock"          $L "-DTASK=1 -DHONOUR=0 -DSTRICT=1" safety holds
  run "4     publication, ignores key, TO>lock"       $L "-DTASK=0 -DHONOUR=0 -DSTRICT=1 -DCALL_TO=2" safety violated show
  run "4     same, excused when lock lost in flight"  $L "-DTASK=0 -DHONOUR=0 -DCALL_TO=2" safety holds
  run "2     publication: reaches a terminal state"   $L "-DTASK=0" p2 holds
  run "2     AI task: reaches a terminal state"       $L "-DTASK=1" p2 holds
  run "limit AI, ignores key: one billed run"         $L "-DTASK=1 -DHONOUR=0 -DSTRICT=1 -DAI_ONCE=1" safety violated show
  ;;
mutants)
  echo "mutant / property                            result    (exhaustive; time in seconds)"
  run "no begin CAS / 4 AI task"                     $L "-DMUT_NO_BEGIN_CAS -DTASK=1 -DHONOUR=0 -DSTRICT=1" safety violated show
  run "no begin CAS / 4 publication"                 $L "-DMUT_NO_BEGIN_CAS -DTASK=0 -DHONOUR=0 -DSTRICT=1" safety report
  run "no begin CAS / 3 both"                        $L "-DMUT_NO_BEGIN_CAS -DTASK=1 -DHONOUR=1" safety report
  run "no external_ref lookup / 4 publication"       $L "-DMUT_NO_LOOKUP -DTASK=0 -DHONOUR=0 -DSTRICT=1" safety violated show
  run "no reconciler / 2 publication"                $L "-DMUT_NO_RECONCILER -DTASK=0" p2 violated
  run "no jobId dedup / 4 publication"               $L "-DMUT_NO_DEDUP -DTASK=0 -DHONOUR=0 -DSTRICT=1" safety report show
  run "no jobId dedup / 4 AI task"                   $L "-DMUT_NO_DEDUP -DTASK=1 -DHONOUR=0 -DSTRICT=1" safety report
  run "no jobId dedup / 3 publication"               $L "-DMUT_NO_DEDUP -DTASK=0 -DHONOUR=1" safety report
  run "no jobId dedup / 2 publication"               $L "-DMUT_NO_DEDUP -DTASK=0" p2 report
  run "no locked_by on mark / 5"                     $O "-DMUT_NO_LOCKEDBY" safety report
  run "no locked_by on mark / 1"                     $O "-DMUT_NO_LOCKEDBY" p1 report
  ;;
*) echo "usage: $0 model|mutants"; exit 2 ;;
esac
if [ $bad != 0 ]; then echo "FAIL: a result differs from the expected one"; exit 1; fi
echo "OK: every result is the expected one"
