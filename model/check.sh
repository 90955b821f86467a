#!/usr/bin/env bash
# Runs spin over the delivery models: `check.sh model` (the properties) or `check.sh mutants`
# (one guard removed at a time). Every search is exhaustive: no BITSTATE, no hash-compact
# (HC); -DCOLLAPSE compresses the stored states without loss. The searches are independent
# and run MODEL_JOBS at a time (default: the number of cores). Prints each search's result,
# stored states, depth, CPU seconds and wall seconds, in the order below; exit status 1 when a
# result is not the expected one, 2 when spin or gcc is missing or fails.
#
# Liveness (properties 1 and 2, <>[] done) is searched first with no fairness assumption at
# all: a property that holds for every run holds for the weakly fair ones. Only a violation
# is searched again under weak fairness (-f), so that a reported violation is a fair run.
set -uo pipefail
cd "$(dirname "$0")"
for tool in spin gcc; do
  command -v $tool >/dev/null || { echo "$tool not found (make model-deps installs spin)"; exit 2; }
done
MEMLIM=${MODEL_MEMLIM:-2048}   # MB per search
TIMEOUT=${MODEL_TIMEOUT:-600}  # s per search
JOBS=${MODEL_JOBS:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# pan DIR FLAGS...: runs DIR/pan, its output in DIR/pan.out, its times in DIR/time.out
pan() {
  local dir=$1; shift
  if [ -x /usr/bin/time ]; then
    (cd "$dir" && /usr/bin/time -f '%U %S %e' -o time.out timeout "$TIMEOUT" ./pan "$@" >pan.out 2>&1)
  else
    (cd "$dir" && timeout "$TIMEOUT" ./pan "$@" >pan.out 2>&1)
  fi
}

# compile DIR MODEL "DEFINES" CFLAGS... (pan.c from spin -a, then gcc)
compile() {
  local dir=$1 model=$2 defs=$3; shift 3
  (cd "$dir" && spin -a $defs "$model" >/dev/null 2>spin.err) || { cat "$dir/spin.err"; return 1; }
  (cd "$dir" && gcc -O1 -w -DMEMLIM="$MEMLIM" "$@" -o pan pan.c 2>gcc.err) || { cat "$dir/gcc.err"; return 1; }
}

# verdict DIR: holds | violated | INCOMPLETE | NO RESULT
verdict() {
  local errors
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$1/pan.out" | head -1)
  if grep -q "Search not completed\|reached -DMEMLIM\|max search depth too small" "$1/pan.out" && [ "${errors:-0}" = 0 ]; then
    echo INCOMPLETE
  elif [ -z "$errors" ]; then echo "NO RESULT"
  elif [ "$errors" = 0 ]; then echo holds
  else echo violated
  fi
}

# search N NAME MODEL "DEFINES" MODE EXPECT [show]: one search, its line in $work/N.line
#   MODE: safety (assertions, invalid end states) | p1 | p2 (LTL, see the head of this file)
#   EXPECT: holds | violated | report (mutants of the last two guards: print the outcome)
search() {
  local n=$1 name=$2 model=$3 defs=$4 mode=$5 expect=$6 show=${7:-}
  local dir="$work/$n" line=$work/$n.line result note="" fair=""
  mkdir -p "$dir" && cp "$model" "$dir/"
  case $mode in
    safety)
      compile "$dir" "$model" "$defs" -DCOLLAPSE -DSAFETY -DNOCLAIM >"$dir/build.err" || { echo "$name: build failed" >"$line"; cat "$dir/build.err" >>"$line"; echo 2 >"$work/$n.bad"; return; }
      pan "$dir" -m400000 -w22 ;;
    p1|p2)
      compile "$dir" "$model" "$defs" -DCOLLAPSE -DNFAIR=3 >"$dir/build.err" || { echo "$name: build failed" >"$line"; cat "$dir/build.err" >>"$line"; echo 2 >"$work/$n.bad"; return; }
      pan "$dir" -m400000 -w22 -a -N "$mode"
      note="no fairness assumed"
      if [ "$(verdict "$dir")" = violated ]; then
        fair=$(awk '/states, stored/ {print $1; exit}' "$dir/pan.out")
        pan "$dir" -m400000 -w22 -a -f -N "$mode"
        note="weak fairness (-f); without it: violated, $fair states"
      fi ;;
  esac
  result=$(verdict "$dir")
  local states depth cpu wall what
  states=$(awk '/states, stored/ {print $1; exit}' "$dir/pan.out")
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$dir/pan.out" | head -1)
  read -r u s wall <"$dir/time.out" 2>/dev/null || true
  cpu=$(awk -v u="${u:-0}" -v s="${s:-0}" 'BEGIN { printf "%.1f", u + s }')
  what=$(grep -m1 -o "assertion violated.*\|acceptance cycle.*" "$dir/pan.out" || true)
  printf '%-44s %-9s states %8s  depth %3s  cpu %5ss  wall %5ss  %s%s\n' "$name" "$result" "${states:-?}" "${depth:-?}" \
    "$cpu" "${wall:-?}" "$note" "${what:+; $what}" >"$line"
  case $expect in
    holds)    [ "$result" = holds ] || echo 1 >"$work/$n.bad" ;;
    violated) [ "$result" = violated ] || echo 1 >"$work/$n.bad" ;;
    report)   [ "$result" = holds ] || [ "$result" = violated ] || echo 1 >"$work/$n.bad" ;;
  esac
  if [ "$result" = violated ] && [ -n "$show" ]; then
    # the shortest counterexample (-i: the search goes on with a shorter depth bound after
    # each error), one line per process step
    if [ "$mode" = safety ]; then (cd "$dir" && timeout "$TIMEOUT" ./pan -m400000 -w22 -i >pan-i.out 2>&1); fi
    echo "      shortest counterexample:" >>"$line"
    (cd "$dir" && spin -t -p $defs "$model" 2>/dev/null) | python3 trail.py | sed 's/^/      /' >>"$line"
  fi
}

n=0
queue() {  # queue NAME MODEL DEFINES MODE EXPECT [show]: starts the search when a slot is free
  n=$((n + 1))
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  search "$n" "$@" &
}

L=lifecycle.pml
F=lifecycle_full.pml
O=outbox.pml
# lifecycle_full.pml's searches: each enables one path lifecycle.pml does not have (the last
# look a delivery of its own is in all of them, the call fence too) and leaves out the paths
# lifecycle.pml checks (shutdown, failed record transaction, a live worker's lock loss); one
# worker may crash (the workers are alike), and Redis restarts, where a search has them, may
# also be only in a backlog (REDIS_BUSY=0: no worker on a job, no call in flight)
FN="-DSTOPS=0 -DRECFAILS=0 -DLOSSES=0 -DCRASHERS=1 -DGIVEUPS=0 -DLOOKFAILS=0 -DREDIS=0"
t0=$SECONDS
case ${1:-model} in
model)
  echo "property                                     result    (exhaustive; cpu and wall in seconds; $JOBS at a time)"
  queue "5     outbox: marked only after its job added" $O "" safety holds
  queue "1     outbox: every event dispatched/dead"     $O "" p1 holds
  queue "3     publication, gateway honours key"        $L "-DTASK=0 -DHONOUR=1" safety holds
  queue "3     AI task, provider honours key"           $L "-DTASK=1 -DHONOUR=1" safety holds
  queue "4     publication, ignores key, TO<=lock"      $L "-DTASK=0 -DHONOUR=0 -DSTRICT=1" safety holds
  queue "4     AI task, ignores key, TO<=lock"          $L "-DTASK=1 -DHONOUR=0 -DSTRICT=1" safety holds
  queue "4     publication, ignores key, TO>lock"       $L "-DTASK=0 -DHONOUR=0 -DSTRICT=1 -DCALL_TO=2" safety violated show
  queue "4     AI task, ignores key, TO>lock"           $L "-DTASK=1 -DHONOUR=0 -DSTRICT=1 -DCALL_TO=2" safety violated
  queue "4     same, TO<=lock with more time (2 <= 2)"  $L "-DTASK=0 -DHONOUR=0 -DSTRICT=1 -DCALL_TO=2 -DLOCK_LEFT=2" safety holds
  queue "4     publication, excused when lock lost"     $L "-DTASK=0 -DHONOUR=0 -DCALL_TO=2" safety holds
  queue "4     AI task, excused when lock lost"         $L "-DTASK=1 -DHONOUR=0 -DCALL_TO=2" safety holds
  queue "lost  publication, ignores key, lock lost"     $L "-DTASK=0 -DHONOUR=0 -DSTRICT=1 -DLOSSES=1" safety violated show
  queue "lost  AI task, ignores key, lock lost"         $L "-DTASK=1 -DHONOUR=0 -DSTRICT=1 -DLOSSES=1" safety violated
  queue "2     publication: reaches a terminal state"   $L "-DTASK=0" p2 holds
  queue "2     AI task: reaches a terminal state"       $L "-DTASK=1" p2 holds
  queue "limit AI, ignores key: one billed run"         $L "-DTASK=1 -DHONOUR=0 -DSTRICT=1 -DAI_ONCE=1" safety violated show
  queue "6,10  full: publication, 2 looks fail"         $F "$FN -DTASK=0 -DHONOUR=0 -DSTRICT=1 -DLOOKFAILS=2" safety holds
  queue "6,10  full: publication, Redis restart"        $F "$FN -DTASK=0 -DHONOUR=0 -DSTRICT=1 -DREDIS=1" safety holds
  queue "8     full: publication, record gives up"      $F "$FN -DTASK=0 -DHONOUR=0 -DSTRICT=1 -DGIVEUPS=1" safety holds
  queue "8     full: AI task, record gives up, Redis"   $F "$FN -DTASK=1 -DHONOUR=0 -DSTRICT=1 -DGIVEUPS=1 -DREDIS=1" safety holds
  queue "9     full: publication, 2 losses in backlog"  $F "$FN -DTASK=0 -DHONOUR=0 -DSTRICT=1 -DREDIS=2 -DREDIS_BUSY=0" safety holds
  queue "9     full: AI task, 2 losses in backlog"      $F "$FN -DTASK=1 -DHONOUR=0 -DSTRICT=1 -DREDIS=2 -DREDIS_BUSY=0" safety holds
  queue "9     full: publication, both workers crash"  $F "$FN -DTASK=0 -DHONOUR=0 -DSTRICT=1 -DCRASHERS=2" safety holds
  queue "9     full: AI task, both workers crash"      $F "$FN -DTASK=1 -DHONOUR=0 -DSTRICT=1 -DCRASHERS=2" safety holds
  queue "4,8   full: publication, fence, TO>lock"       $F "$FN -DTASK=0 -DHONOUR=0 -DSTRICT=1 -DCALL_TO=2" safety holds
  queue "4,8   full: AI task, fence, TO>lock"           $F "$FN -DTASK=1 -DHONOUR=0 -DSTRICT=1 -DCALL_TO=2" safety holds
  queue "2     full: publication, 2 looks fail"         $F "$FN -DTASK=0 -DLOOKFAILS=2" p2 holds
  queue "2     full: AI task, gives up, Redis backlog"  $F "$FN -DTASK=1 -DGIVEUPS=1 -DREDIS=1 -DREDIS_BUSY=0" p2 holds
  ;;
mutants)
  echo "mutant / property                            result    (exhaustive; cpu and wall in seconds; $JOBS at a time)"
  queue "no begin CAS / 4 AI task"                     $L "-DMUT_NO_BEGIN_CAS -DTASK=1 -DHONOUR=0 -DSTRICT=1" safety violated show
  queue "no begin CAS / 4 publication"                 $L "-DMUT_NO_BEGIN_CAS -DTASK=0 -DHONOUR=0 -DSTRICT=1" safety report
  queue "no begin CAS / 3 AI task"                     $L "-DMUT_NO_BEGIN_CAS -DTASK=1 -DHONOUR=1" safety report
  queue "no begin CAS / 3 publication"                 $L "-DMUT_NO_BEGIN_CAS -DTASK=0 -DHONOUR=1" safety report
  queue "no external_ref lookup / 4 publication"       $L "-DMUT_NO_LOOKUP -DTASK=0 -DHONOUR=0 -DSTRICT=1" safety violated show
  queue "no reconciler / 2 publication"                $L "-DMUT_NO_RECONCILER -DTASK=0" p2 violated
  queue "no reconciler / 2 AI task"                    $L "-DMUT_NO_RECONCILER -DTASK=1" p2 violated
  queue "no jobId dedup / 4 publication"               $L "-DMUT_NO_DEDUP -DTASK=0 -DHONOUR=0 -DSTRICT=1" safety report show
  queue "no jobId dedup / 4 AI task"                   $L "-DMUT_NO_DEDUP -DTASK=1 -DHONOUR=0 -DSTRICT=1" safety report
  queue "no jobId dedup / 3 publication"               $L "-DMUT_NO_DEDUP -DTASK=0 -DHONOUR=1" safety report
  queue "no jobId dedup / 3 AI task"                   $L "-DMUT_NO_DEDUP -DTASK=1 -DHONOUR=1" safety report
  queue "no jobId dedup / 2 publication (no loss)"     $L "-DMUT_NO_DEDUP -DTASK=0 -DLOSSES=0" p2 report
  queue "no jobId dedup / 2 AI task (no loss)"         $L "-DMUT_NO_DEDUP -DTASK=1 -DLOSSES=0" p2 report
  queue "no locked_by on mark / 5"                     $O "-DMUT_NO_LOCKEDBY" safety report
  queue "no locked_by on mark / 1"                     $O "-DMUT_NO_LOCKEDBY" p1 report
  queue "no record CAS / 7 publication"                $L "-DMUT_NO_RECORD_CAS -DTASK=0 -DHONOUR=1" safety violated show
  queue "no record CAS / 7 AI task"                    $L "-DMUT_NO_RECORD_CAS -DTASK=1 -DHONOUR=1" safety violated
  queue "no last look / 6 publication"                 $L "-DMUT_NO_LASTLOOK -DTASK=0 -DHONOUR=1" safety violated show
  queue "hand-back before the call ends / 4 publ."     $L "-DMUT_HANDBACK_IN_FLIGHT -DTASK=0 -DHONOUR=0 -DSTRICT=1" safety violated show
  queue "hand-back before the call ends / 4 AI task"   $L "-DMUT_HANDBACK_IN_FLIGHT -DTASK=1 -DHONOUR=0 -DSTRICT=1" safety violated
  queue "no cancel on lock loss / 4 publication"       $L "-DMUT_NO_LOSS_CANCEL -DTASK=0 -DHONOUR=0" safety violated show
  queue "no cancel on lock loss / 4 AI task"           $L "-DMUT_NO_LOSS_CANCEL -DTASK=1 -DHONOUR=0" safety violated
  queue "full: unrun redelivery counts / 9 AI task"    $F "$FN -DMUT_UNRUN_COUNTS -DTASK=1 -DHONOUR=1 -DREDIS=2 -DREDIS_BUSY=0" safety violated show
  queue "full: no held-result check / 8 AI task"       $F "$FN -DMUT_NO_HELD_CHECK -DTASK=1 -DHONOUR=0 -DSTRICT=1 -DGIVEUPS=1" safety violated show
  queue "full: fail without a look / 10 publication"   $F "$FN -DMUT_NO_LOOK_WAIT -DTASK=0 -DHONOUR=0 -DSTRICT=1" safety violated show
  queue "full: failed look fails blind / 10 publ."     $F "$FN -DMUT_BLIND_FAIL -DTASK=0 -DHONOUR=0 -DSTRICT=1 -DLOOKFAILS=2" safety violated show
  queue "full: no call fence / 8 publication"          $F "$FN -DMUT_NO_FENCE -DTASK=0 -DHONOUR=0 -DSTRICT=1 -DCALL_TO=2" safety violated show
  queue "full: look ignores the fence / 6 publ."       $F "$FN -DMUT_LOOK_NO_FENCE -DTASK=0 -DHONOUR=1 -DCALL_TO=2" safety violated show
  queue "full: look ignores a new run / 6 publ."       $F "$FN -DMUT_LOOK_NO_RUN_CHECK -DTASK=0 -DHONOUR=1" safety violated show
  queue "full: stall fails an unrun task / 9 publ."    $F "$FN -DMUT_STALL_FAILS_UNRUN -DTASK=0 -DHONOUR=0 -DSTRICT=1 -DCRASHERS=2" safety violated show
  queue "full: stall fails an unrun task / 9 AI task"  $F "$FN -DMUT_STALL_FAILS_UNRUN -DTASK=1 -DHONOUR=0 -DSTRICT=1 -DCRASHERS=2" safety violated
  ;;
*) echo "usage: $0 model|mutants"; exit 2 ;;
esac
wait
bad=0
for i in $(seq 1 "$n"); do
  cat "$work/$i.line"
  if [ -f "$work/$i.bad" ]; then bad=$(( $(cat "$work/$i.bad") > bad ? $(cat "$work/$i.bad") : bad )); fi
done
echo "$n searches in $((SECONDS - t0)) s"
if [ $bad = 2 ]; then echo "FAIL: a model did not build"; exit 2; fi
if [ $bad != 0 ]; then echo "FAIL: a result differs from the expected one"; exit 1; fi
echo "OK: every result is the expected one"
