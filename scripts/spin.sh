#!/usr/bin/env bash
# Checks the SPIN model of the protocol (model/election.pml;
# docs/verification.md, "The model"): the model, in each configuration, must
# hold (no assertion violated, the search complete); each variant, which
# removes one rule of the safety argument, must give a counterexample. One line per run: kind, name,
# result, states stored, seconds. Exits non-zero if any run is not as
# expected. Installs spin (the Debian package) if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$PWD/model/election.pml

if ! command -v spin >/dev/null 2>&1; then
  echo "installing spin from the Debian packages (apt-get install spin)..." >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq spin >/dev/null
fi
command -v gcc >/dev/null 2>&1 || { echo "spin.sh: gcc is needed to build the verifier" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# kind, name, what is expected (hold, fail), -D flags. A model run checks the
# protocol as implemented with some of the environment's features (they do not
# all fit in one run); a variant removes a rule; a finding is a limit the
# model found that the configuration must respect (docs/verification.md,
# "The model"): outside it, a counterexample.
runs=(
  "model|getlock, 2 terms, every feature|hold|-DSTUCK -DDEMOTE -DEXTKILL -DFENCED -DDOWNSTREAM -DFAILOVER -DMAXTERMS=2"
  "model|getlock, 3 terms, no failover, priority|hold|-DPRIORITY -DSTUCK -DDEMOTE -DEXTKILL -DFENCED"
  "model|getlock, 3 terms, no demotion|hold|-DSTUCK -DEXTKILL -DFENCED -DDOWNSTREAM -DFAILOVER"
  "model|getlock, 3 terms, late downstream writes|hold|-DDOWNSTREAM -DINFLIGHT -DFAILOVER"
  "model|leaserow, 3 terms, priority|hold|-DLEASEROW -DPRIORITY -DSTUCK -DDEMOTE -DFENCED -DDOWNSTREAM -DFAILOVER"
  "model|getlock, 3 terms, preferred leaders|hold|-DPREFER -DSTUCK -DEXTKILL -DFENCED"
  "model|leaserow, 3 terms, preferred leaders|hold|-DLEASEROW -DPREFER -DSTUCK -DFENCED -DDOWNSTREAM -DFAILOVER"
  "model|getlock without wait_timeout|hold|-DNO_WAIT_TIMEOUT -DSTUCK -DDEMOTE -DEXTKILL"
  "model|getlock without the lock-delay|hold|-DNO_LOCK_DELAY -DSTUCK -DDEMOTE -DEXTKILL"
  "model|leaserow without the lock-delay|hold|-DLEASEROW -DNO_LOCK_DELAY -DSTUCK -DDEMOTE"
  "model|getlock, COMMIT after the term|hold|-DCOMMIT_AFTER_TERM -DEXTKILL -DFENCED -DFAILOVER"
  "model|getlock, a demoted killed at once|hold|-DDEMOTE_AT_ONCE -DSTUCK -DDEMOTE"
  "model|getlock, the lock-delay's promise|hold|-DLOCKDELAY_PROMISE -DSTUCK -DDEMOTE -DEXTKILL"
  "model|getlock, clock steps|hold|-DCLOCKSTEP -DSTUCK"
  "model|getlock, clock steps, the promise, 2 terms|hold|-DCLOCKSTEP -DSTUCK -DDEMOTE -DEXTKILL -DLOCKDELAY_PROMISE -DMAXTERMS=2"
  "model|leaserow, clock steps|hold|-DLEASEROW -DCLOCKSTEP -DSTUCK -DDEMOTE -DFENCED"
  "model|getlock, a session's lease, 2 terms, all|hold|-DSESSION_LEASE -DSTUCK -DDEMOTE -DEXTKILL -DFENCED -DDOWNSTREAM -DFAILOVER -DMAXTERMS=2"
  "model|getlock, a session's lease, the promise|hold|-DSESSION_LEASE -DLOCKDELAY_PROMISE -DSTUCK -DDEMOTE -DEXTKILL -DFENCED"
  "model|getlock, a session's lease, preferred|hold|-DSESSION_LEASE -DPREFER -DSTUCK -DEXTKILL -DFENCED"
  "model|getlock, a session's lease, clock steps|hold|-DSESSION_LEASE -DCLOCKSTEP -DSTUCK -DDEMOTE -DEXTKILL -DLOCKDELAY_PROMISE -DMAXTERMS=2"
  "variant|a getlock wait_timeout = L|fail|-DWAIT_EQ_LEASE"
  "variant|b getlock no epoch comparison|fail|-DNO_EPOCH_CHECK -DFENCED -DEXTKILL"
  "variant|b leaserow no epoch comparison|fail|-DLEASEROW -DNO_EPOCH_CHECK -DFENCED -DFAILOVER"
  "variant|b getlock no shared lock|fail|-DNO_EPOCH_LOCK -DFENCED"
  "variant|b leaserow no shared lock|fail|-DLEASEROW -DNO_EPOCH_LOCK -DFENCED"
  "variant|c getlock lease from the reply|fail|-DLEASE_FROM_REPLY"
  "variant|c leaserow lease from the reply|fail|-DLEASEROW -DLEASE_FROM_REPLY"
  "variant|d getlock demoted killed at once, no lock-delay|fail|-DDEMOTE_AT_ONCE -DNO_LOCK_DELAY -DDEMOTE"
  "variant|d leaserow demoted taken at once, no lock-delay|fail|-DLEASEROW -DDEMOTE_AT_ONCE -DNO_LOCK_DELAY -DDEMOTE"
  "variant|d getlock preferred, at once, no lock-delay|fail|-DPREFER -DDEMOTE_AT_ONCE -DNO_LOCK_DELAY"
  "variant|e getlock plain counter|fail|-DPLAIN_COUNTER -DFAILOVER"
  "variant|e leaserow plain counter|fail|-DLEASEROW -DPLAIN_COUNTER -DFAILOVER"
  "variant|f getlock failover within the skew|fail|-DFAST_FAILOVER -DFAILOVER"
  "variant|g getlock hang kill at L|fail|-DNO_MARGIN -DSTUCK"
  "variant|g leaserow stale at L|fail|-DLEASEROW -DNO_MARGIN"
  "variant|h leaserow renewal unchecked|fail|-DLEASEROW -DRENEW_UNCHECKED -DDEMOTE"
  "variant|i getlock lock-delay not carried over|fail|-DLOCKDELAY_PROMISE -DNO_CARRY_LOCK_DELAY -DDEMOTE -DEXTKILL"
  "variant|i getlock demoted killed at once, not carried|fail|-DDEMOTE_AT_ONCE -DNO_CARRY_LOCK_DELAY -DDEMOTE"
  "variant|j getlock ages on the server's clock|fail|-DCLOCKSTEP -DSERVER_AGE -DSTUCK"
  "variant|j leaserow ages on the server's clock|fail|-DLEASEROW -DCLOCKSTEP -DSERVER_AGE"
  "variant|k leaserow first look on the server's clock|fail|-DLEASEROW -DCLOCKSTEP -DFIRST_LOOK"
  "variant|l getlock carried delay on the server's clock|fail|-DCLOCKSTEP -DSERVER_DELAY -DLOCKDELAY_PROMISE -DDEMOTE -DEXTKILL"
  "finding|getlock lock-delay carried over, S = DRIFT|fail|-DS=1 -DLOCKDELAY_PROMISE -DDEMOTE -DEXTKILL"
)

echo "spin $(spin -V | awk '{print $3}'): $(basename "$model"), L=2 S=2 DRIFT=1 K=1 ticks unless said (docs/verification.md, \"The model\")"
ms() { echo $(($(date +%s%N) / 1000000)); }

# check I RUN verifies run RUN in $work/I: its line in $work/I/line, what
# went wrong on $work/I/err, and $work/I/bad if it was not as expected.
check() {
  local i=$1 kind name expect flags
  IFS='|' read -r kind name expect flags <<<"$2"
  local dir=$work/$i
  mkdir -p "$dir"
  cp "$model" "$dir/election.pml"
  # A counterexample comes after a few thousand states: a verifier that
  # compiles fast and a small hash table; a complete search wants speed.
  local cc="-O2" hash="-w24"
  [ "$expect" = fail ] && cc="-O0" hash="-w20"
  local t0
  t0=$(ms)
  # shellcheck disable=SC2086
  if ! (cd "$dir" && spin $flags -a election.pml >spin.out 2>&1 &&
    gcc $cc -DSAFETY -DMEMLIM=2048 -o pan pan.c >gcc.out 2>&1 &&
    ./pan $hash >pan.out 2>&1); then
    {
      echo "$kind $name: could not build or run the verifier ($flags)"
      cat "$dir"/spin.out "$dir"/gcc.out "$dir"/pan.out 2>/dev/null | tail -20
    } >"$dir/err"
    touch "$dir/bad"
    return
  fi
  local secs errors states complete=yes result
  secs=$(awk -v ms=$(($(ms) - t0)) 'BEGIN { printf "%.1f", ms / 1000 }')
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$dir/pan.out")
  states=$(awk '/states, stored/ {print $1; exit}' "$dir/pan.out")
  grep -qE 'Search not completed|reached -DMEMLIM|max search depth too small' "$dir/pan.out" && complete=no
  if [ "$errors" != 0 ]; then
    result="counterexample"
  elif [ $complete = yes ]; then
    result="holds"
  else
    result="incomplete"
  fi
  printf '%-8s %-48s %-15s %9s states %5s s\n' "$kind" "$name" "$result" "$states" "$secs" >"$dir/line"
  if { [ "$expect" = hold ] && [ "$result" != holds ]; } || { [ "$expect" = fail ] && [ "$result" != counterexample ]; }; then
    touch "$dir/bad"
    echo "  expected it to ${expect}: $flags" >"$dir/err"
    if [ "$result" = counterexample ]; then
      # The trail, as the model narrates it.
      # shellcheck disable=SC2086
      (cd "$dir" && spin $flags -t election.pml 2>&1 | grep -vE '^\s*$|processes created|^#processes|^\s+[a-z_]+(\[[0-9]\])? = |proc +[0-9]' |
        sed 's/^ *//' | uniq -c | sed 's/^ *1 //; s/^ *\([0-9]*\) \(.*\)/\2 (x\1)/' | tail -40 | sed 's/^/  /') >>"$dir/err"
    fi
  fi
}

# The runs are independent: as many at once as there are cores (each
# verifier is one process of at most MEMLIM), reported in their order.
start=$(ms)
jobs=$(nproc 2>/dev/null || echo 1)
i=0
for run in "${runs[@]}"; do
  i=$((i + 1))
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
    wait -n
  done
  check "$i" "$run" &
done
wait
bad=0
for n in $(seq 1 "$i"); do
  [ -f "$work/$n/line" ] && cat "$work/$n/line"
  [ -f "$work/$n/err" ] && cat "$work/$n/err" >&2
  [ -f "$work/$n/bad" ] && bad=1
done
total=$((($(ms) - start) / 1000))
if [ $bad -ne 0 ]; then
  echo "spin: $i runs, NOT all as expected (${total} s)" >&2
  exit 1
fi
echo "spin: $i runs, all as expected (${total} s)"
